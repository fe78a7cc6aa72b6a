package filebrowser

import (
	"container/heap"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// Listing pages: a directory is listed in name order, at most limit names
// per answer, and the next page starts after the last name of this one.
const (
	DefaultLimit = 1000
	MaxLimit     = 10000
	// readChunk is how many names are read from the directory at once: the
	// memory a listing holds is O(limit + readChunk), whatever the size
	// of the directory.
	readChunk = 1024
)

// page is what a listing request asks for.
type page struct {
	limit int
	after string // names <= after were on earlier pages; "" for the first
}

// parsePage reads ?limit= and ?continue=.
func parsePage(q url.Values) (page, error) {
	p := page{limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return page{}, fmt.Errorf("limit %q: want an integer from 1 to %d", truncate(v), MaxLimit)
		}
		p.limit = n
	}
	if v := q.Get("continue"); v != "" {
		name, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(name) == 0 {
			return page{}, fmt.Errorf("continue %q: not a token from an earlier listing of this folder", truncate(v))
		}
		p.after = string(name)
	}
	return p, nil
}

// continueToken is the opaque token that resumes a listing after name.
func continueToken(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }

func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// nameReader is (*os.File).Readdirnames.
type nameReader func(n int) ([]string, error)

// selectPage reads every name of a directory in chunks and keeps the
// limit smallest names after p.after, in order; more reports names beyond
// them. Memory is bounded by limit and the chunk size; time is O(n log
// limit) for a directory of n names, per page.
func selectPage(read nameReader, p page) (names []string, more bool, err error) {
	h := &maxHeap{}
	for {
		chunk, err := read(readChunk)
		for _, name := range chunk {
			if name <= p.after {
				continue
			}
			switch {
			case h.Len() < p.limit:
				heap.Push(h, name)
			case name < (*h)[0]:
				(*h)[0] = name
				heap.Fix(h, 0)
				more = true
			default:
				more = true
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		if len(chunk) == 0 {
			break
		}
	}
	names = make([]string, h.Len())
	for i := len(names) - 1; i >= 0; i-- {
		names[i] = heap.Pop(h).(string)
	}
	return names, more, nil
}

// maxHeap keeps the largest kept name on top, to be replaced by a smaller.
type maxHeap []string

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
