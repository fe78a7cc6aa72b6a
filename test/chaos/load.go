package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Load is an open-loop load generator: Rate async invocations per second
// for Duration, each with its own invocation ID, spread round-robin over
// URLs (the replicas behind one URL list). A caller retries the same ID on
// a transport error or a 5xx, moving to the next URL, for up to RetryFor,
// as a client with an idempotency key does; 4xx and 429 are final.
type Load struct {
	URLs           []string
	Namespace      string
	Pool           string
	Rate           float64
	Duration       time.Duration
	IDPrefix       string
	TimeoutSeconds int
	// RetryFor bounds one invocation's retries (default 10s).
	RetryFor time.Duration
	// MaxInFlight bounds concurrent requests (default 4096); a tick that
	// finds none free is counted in Dropped, so the offered rate is
	// visible.
	MaxInFlight int
	// Total stops the load after this many invocations (0: Duration
	// alone); Block makes a tick wait for a free slot instead of dropping
	// (a closed loop, to fill a backlog as fast as the ingress takes it).
	Total int
	Block bool
	// PayloadBytes pads each payload to about this size.
	PayloadBytes int
}

// LoadResult is what the callers saw.
type LoadResult struct {
	Offered  int
	Accepted []string
	// Refused counts final answers that were not 202, by status (0: the
	// retries ran out on transport errors).
	Refused map[int]int
	// Retried counts invocations that needed more than one request.
	Retried int
	Dropped int
	Elapsed time.Duration
}

// Run drives the load until Duration passes or ctx ends, then waits for
// the requests in flight.
func (l Load) Run(ctx context.Context) LoadResult {
	retryFor := l.RetryFor
	if retryFor <= 0 {
		retryFor = 10 * time.Second
	}
	maxIn := l.MaxInFlight
	if maxIn <= 0 {
		maxIn = 4096
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	res := LoadResult{Refused: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxIn)
	interval := time.Duration(float64(time.Second) / l.Rate)
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var end <-chan time.Time
	if l.Duration > 0 {
		end = time.After(l.Duration)
	}
	n := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-tick.C:
		}
		// Catch up on ticks a slow scheduler merged, so the offered rate
		// holds on a loaded machine.
		due := int(time.Since(start)/interval) + 1
		if l.Total > 0 {
			due = min(due, l.Total)
		}
		for ; n < due; n++ {
			res.Offered++
			if l.Block {
				slots <- struct{}{}
			} else {
				select {
				case slots <- struct{}{}:
				default:
					res.Dropped++
					continue
				}
			}
			id := l.IDPrefix + strconv.Itoa(n)
			first := n
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				code, tries := l.post(ctx, client, id, first, retryFor)
				mu.Lock()
				defer mu.Unlock()
				if tries > 1 {
					res.Retried++
				}
				if code == http.StatusAccepted {
					res.Accepted = append(res.Accepted, id)
				} else {
					res.Refused[code]++
				}
			}()
		}
		if l.Total > 0 && n >= l.Total {
			break
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

func (l Load) post(ctx context.Context, c *http.Client, id string, first int, retryFor time.Duration) (code, tries int) {
	payload := map[string]string{"id": id}
	if l.PayloadBytes > 0 {
		payload["pad"] = strings.Repeat("x", l.PayloadBytes)
	}
	body, _ := json.Marshal(map[string]any{"mode": "async", "invocationID": id, "timeoutSeconds": l.TimeoutSeconds, "payload": payload})
	deadline := time.Now().Add(retryFor)
	for i := first; ; i++ {
		tries++
		url := l.URLs[i%len(l.URLs)] + "/v1/namespaces/" + l.Namespace + "/pools/" + l.Pool + "/invocations"
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, tries
		}
		req.Header.Set("Content-Type", "application/json")
		code = 0
		if resp, err := c.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		}
		if code != 0 && code < 500 {
			return code, tries
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return code, tries
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// String is a one-line summary for test logs.
func (r LoadResult) String() string {
	return fmt.Sprintf("offered %d, accepted %d, refused %v, retried %d, dropped %d in %v", r.Offered, len(r.Accepted), r.Refused, r.Retried, r.Dropped, r.Elapsed.Round(time.Millisecond))
}
