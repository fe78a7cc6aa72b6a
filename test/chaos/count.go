package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/chaos/execlog"
)

// Counts are one case's outcome.
type Counts struct {
	Accepted  int
	Succeeded int
	// Failed counts every other terminal state (failed, timed out,
	// cancelled, dead-lettered).
	Failed int
	// FailedUnrun counts failed invocations the framework never started.
	FailedUnrun int
	// Lost counts accepted invocations not terminal when the case ended.
	Lost int
	// RunTwice counts invocations the framework answered more than once,
	// or began again after it had answered once — whether or not the
	// answer reached a sidecar: a finished execution run again.
	RunTwice int
	// Restarted counts invocations the framework started more than once
	// (a redelivery after a kill is fine; after a hang or a completion it
	// is not).
	Restarted int
	// MaxStarts is the most runs one invocation had.
	MaxStarts int
	// States counts the final states; Examples names a few invocations per
	// kind of trouble, for the log.
	States   map[messages.State]int
	Examples map[string][]string
}

// Settle polls the Record of every accepted invocation until all are
// terminal, or until nothing changed for quiet, or until within passes.
func Settle(ctx context.Context, url, namespace string, ids []string, quiet, within time.Duration) map[string]messages.Record {
	recs := make(map[string]messages.Record, len(ids))
	pending := append([]string(nil), ids...)
	deadline := time.Now().Add(within)
	lastChange := time.Now()
	// A GET of a 10 MiB result reads it from the Object Store: slow on a
	// loaded machine, and not a lost invocation.
	client := &http.Client{Timeout: 30 * time.Second}
	for len(pending) > 0 && ctx.Err() == nil {
		var mu sync.Mutex
		var next []string
		changed := false
		var wg sync.WaitGroup
		work := make(chan string)
		for range 8 {
			wg.Go(func() {
				for id := range work {
					rec, err := getRecord(ctx, client, url, namespace, id)
					mu.Lock()
					if err == nil {
						if old, ok := recs[id]; !ok || old.State != rec.State {
							changed = true
						}
						recs[id] = rec
					}
					if err != nil || !rec.State.Terminal() {
						next = append(next, id)
					}
					mu.Unlock()
				}
			})
		}
		for _, id := range pending {
			work <- id
		}
		close(work)
		wg.Wait()
		pending = next
		if changed {
			lastChange = time.Now()
		}
		if len(pending) == 0 || time.Now().After(deadline) || time.Since(lastChange) > quiet {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return recs
}

func getRecord(ctx context.Context, c *http.Client, url, namespace, id string) (messages.Record, error) {
	var rec messages.Record
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/namespaces/"+namespace+"/invocations/"+id, nil)
	if err != nil {
		return rec, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return rec, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rec, fmt.Errorf("GET %s: HTTP %d", id, resp.StatusCode)
	}
	return rec, json.NewDecoder(resp.Body).Decode(&rec)
}

// Count combines the accepted IDs, their Records and the execution log.
func Count(ids []string, recs map[string]messages.Record, runs map[string]*execlog.Runs) Counts {
	c := Counts{Accepted: len(ids), States: map[messages.State]int{}, Examples: map[string][]string{}}
	example := func(kind, id string) {
		if len(c.Examples[kind]) < 5 {
			c.Examples[kind] = append(c.Examples[kind], id)
		}
	}
	for _, id := range ids {
		rec, ok := recs[id]
		st := rec.State
		if !ok {
			st = "unknown"
		}
		c.States[st]++
		r := runs[id]
		if r == nil {
			r = &execlog.Runs{}
		}
		switch {
		case st == messages.StateSucceeded:
			c.Succeeded++
		case ok && st.Terminal():
			c.Failed++
			if r.Started == 0 {
				c.FailedUnrun++
				example("failed unrun", id)
			}
		default:
			c.Lost++
			example("lost ("+string(st)+")", id)
		}
		if r.Answered > 1 || r.StartedAfterEnd > 0 {
			c.RunTwice++
			example("run twice", fmt.Sprintf("%s %v", id, r.Workers))
		}
		if r.Started > 1 {
			c.Restarted++
		}
		c.MaxStarts = max(c.MaxStarts, r.Started)
	}
	return c
}

// String is a one-line summary for test logs.
func (c Counts) String() string {
	kinds := make([]string, 0, len(c.Examples))
	for k := range c.Examples {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	s := fmt.Sprintf("accepted %d, succeeded %d, failed %d (%d never ran), lost %d, run twice %d, started twice %d; states %v",
		c.Accepted, c.Succeeded, c.Failed, c.FailedUnrun, c.Lost, c.RunTwice, c.Restarted, c.States)
	for _, k := range kinds {
		s += fmt.Sprintf("; %s e.g. %v", k, c.Examples[k])
	}
	return s
}

// Pool is the part of GET /v1/namespaces/{ns}/pools/{pool} the harness
// reads: the status the activator last published.
type Pool struct {
	Backlog      int
	InFlight     int
	ReadyWorkers int
	UpdatedAt    time.Time
}

// PoolStatus reads a pool's status from an ingress.
func PoolStatus(ctx context.Context, url, namespace, pool string) (Pool, error) {
	var info struct {
		Status messages.PoolStatus `json:"status"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/namespaces/"+namespace+"/pools/"+pool, nil)
	if err != nil {
		return Pool{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Pool{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Pool{}, fmt.Errorf("GET pool %s/%s: HTTP %d", namespace, pool, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return Pool{}, err
	}
	p := Pool{Backlog: info.Status.Backlog, InFlight: info.Status.InFlight, UpdatedAt: info.Status.UpdatedAt}
	for _, w := range info.Status.Workers {
		if w.Ready && !w.Draining {
			p.ReadyWorkers++
		}
	}
	return p, nil
}
