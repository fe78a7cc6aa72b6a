package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Watches is how many watches of resource (plural: "pods") at scope
// ("namespace", "cluster", or "resource": one object by a metadata.name
// field selector) the API server serves now, by its
// apiserver_longrunning_requests gauge: a test counts what a component
// opens on a control plane of its own (ForTest), or the difference on a
// shared one.
func (c *Cluster) Watches(ctx context.Context, resource, scope string) (int, error) {
	raw, err := c.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("API server metrics: %w", err)
	}
	n := 0
	for sc := bufio.NewScanner(bytes.NewReader(raw)); sc.Scan(); {
		l := sc.Text()
		if strings.HasPrefix(l, "apiserver_longrunning_requests{") && strings.Contains(l, `resource="`+resource+`"`) &&
			strings.Contains(l, `scope="`+scope+`"`) && strings.Contains(l, `verb="WATCH"`) {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			if err != nil {
				return 0, fmt.Errorf("API server metrics: %q: %w", l, err)
			}
			n += int(v)
		}
	}
	return n, nil
}
