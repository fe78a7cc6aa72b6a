package pvc

import (
	"fmt"
	"slices"
	"strings"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// Written lists the claim annotations runplane's controllers write: only
// runplane's ServiceAccounts (or a cluster admin) may set, change or remove
// them, so a user cannot, say, mark a claim prepared.
var Written = []string{
	api.AnnotationPreparePhase,
	api.AnnotationPrepareJob,
	api.AnnotationPrepareMessage,
	api.AnnotationPrepareObservedAttempt,
	api.AnnotationAccessorURL,
	api.AnnotationAccessorPhase,
}

// KeyError says that a claim carries a runplane.io/ annotation runplane
// does not know, or that the requester may not write it.
type KeyError struct {
	Key    string
	Reason string
}

func (e *KeyError) Error() string { return fmt.Sprintf("annotation %s: %s", e.Key, e.Reason) }

// ValidateKeys checks the runplane.io/ annotations of a claim being created
// (old nil) or updated: every one must be known, and one of Written may be
// added, changed or removed only when runplane writes (the caller decides
// it from the requester's identity). Only keys that change are checked, so
// a claim from before a key was retired still takes status writes.
func ValidateKeys(old, cur map[string]string, runplane bool) error {
	known := append(slices.Clone(pvcspec.Configurable), Written...)
	keys := make([]string, 0, len(cur)+len(old))
	for k := range cur {
		keys = append(keys, k)
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, api.Prefix) {
			continue
		}
		ov, inOld := old[k]
		nv, inCur := cur[k]
		if inOld == inCur && ov == nv {
			continue
		}
		if !slices.Contains(known, k) {
			if !inCur {
				continue // removing an unknown key is always fine
			}
			sorted := slices.Sorted(slices.Values(pvcspec.Configurable))
			return &KeyError{Key: k, Reason: "unknown runplane annotation on a PersistentVolumeClaim; the ones a user sets are " + strings.Join(sorted, ", ")}
		}
		if slices.Contains(Written, k) && !runplane {
			return &KeyError{Key: k, Reason: "written by runplane to report the claim's state; only runplane sets, changes or removes it"}
		}
	}
	return nil
}
