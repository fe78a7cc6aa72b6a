package cluster

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// ownStages are stage files of runplane's own, embedded.
//
//go:embed stages/*.yaml
var ownStages embed.FS

// stageSource is one stage file kwok runs: from kwok's module (relative to
// the testbin kwok-stages dir) or, with the "own:" prefix, from ownStages.
type stageSource struct {
	path string
	// fast shortens the stage's fixed delay and jitter, so Pods move
	// through their lifecycle in well under a second; per-Pod annotations
	// that kwok reads still override it.
	fast bool
}

// kwokStages: nodes become Ready and keep their lease; Pods go through the
// general lifecycle (init containers, native sidecars, readiness, Job
// completion, deletion after a kubelet's termination time); the chaos stages fail a Pod's containers when it
// carries their label (pod-container-running-failed.stage.kwok.x-k8s.io=true).
var kwokStages = []stageSource{
	{path: "node/fast/node-initialize.yaml"},
	{path: "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"},
	{path: "pod/general/pod-create.yaml", fast: true},
	{path: "pod/general/pod-init-container-running.yaml", fast: true},
	{path: "own:stages/pod-init-containers-done.yaml"},
	{path: "pod/general/pod-ready.yaml", fast: true},
	{path: "pod/general/pod-complete.yaml", fast: true},
	{path: "own:stages/pod-delete-graceful.yaml"},
	{path: "pod/chaos/pod-container-running-failed.yaml"},
	{path: "pod/chaos/pod-init-container-running-failed.yaml"},
}

// DefaultPodTerminationBound is how long a deleted Pod of a grace period
// at least that long stays Terminating (stages/pod-delete-graceful.yaml).
const DefaultPodTerminationBound = 2 * time.Second

// boundPlaceholder in pod-delete-graceful.yaml is replaced by the bound in
// seconds.
const boundPlaceholder = "BOUND_SECONDS"

// writeStages assembles the stage files into one multi-document file;
// terminationBound bounds how long a deleted Pod stays Terminating.
func writeStages(kwokDir, out string, terminationBound time.Duration) error {
	var docs []string
	for _, s := range kwokStages {
		var data []byte
		var err error
		if own, ok := strings.CutPrefix(s.path, "own:"); ok {
			data, err = ownStages.ReadFile(own)
		} else {
			data, err = os.ReadFile(filepath.Join(kwokDir, s.path))
		}
		if err != nil {
			return fmt.Errorf("reading kwok stage %s: %w", s.path, err)
		}
		if s.fast {
			if data, err = shortenDelay(data); err != nil {
				return fmt.Errorf("kwok stage %s: %w", s.path, err)
			}
		}
		text := strings.ReplaceAll(string(data), boundPlaceholder, strconv.FormatFloat(terminationBound.Seconds(), 'f', -1, 64))
		docs = append(docs, strings.TrimSpace(text))
	}
	if err := os.WriteFile(out, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	return nil
}

func shortenDelay(data []byte) ([]byte, error) {
	var stage map[string]any
	if err := yaml.Unmarshal(data, &stage); err != nil {
		return nil, err
	}
	spec, _ := stage["spec"].(map[string]any)
	delay, _ := spec["delay"].(map[string]any)
	if delay == nil {
		return data, nil
	}
	delay["durationMilliseconds"] = 100
	if _, ok := delay["jitterDurationMilliseconds"]; ok {
		delay["jitterDurationMilliseconds"] = 400
	}
	return yaml.Marshal(stage)
}
