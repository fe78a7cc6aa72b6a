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

// page is what a listing request asks for: the names after after (forward,
// ?continue=), or the names before before (back, ?before=), limit of them.
type page struct {
	limit  int
	after  string // names <= after were on earlier pages; "" for the first
	before string // a page back: the names just before this one
}

// parsePage reads ?limit=, ?continue= and ?before=.
func parsePage(q url.Values) (page, error) {
	p := page{limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return page{}, fmt.Errorf("limit %q: want an integer from 1 to %d", truncate(v), MaxLimit)
		}
		p.limit = n
	}
	var err error
	if p.after, err = nameOf(q, "continue"); err != nil {
		return page{}, err
	}
	if p.before, err = nameOf(q, "before"); err != nil {
		return page{}, err
	}
	if p.after != "" && p.before != "" {
		return page{}, errors.New("continue and before: give one of them (next page or previous page)")
	}
	return p, nil
}

// nameOf decodes the page token of query parameter key ("" when absent).
func nameOf(q url.Values, key string) (string, error) {
	v := q.Get(key)
	if v == "" {
		return "", nil
	}
	name, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(name) == 0 {
		return "", fmt.Errorf("%s %q: not a token from an earlier listing of this folder", key, truncate(v))
	}
	return string(name), nil
}

// continueToken is the opaque token that resumes a listing after name (or,
// as ?before=, goes back from it).
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

// selectPage reads every name of a directory in chunks and keeps, in
// order, the limit smallest names after p.after (or, going back, the limit
// largest before p.before); earlier and later report names on either side
// of them. Memory is bounded by limit and the chunk size; time is
// O(n log limit) for a directory of n names, per page.
func selectPage(read nameReader, p page) (names []string, earlier, later bool, err error) {
	back := p.before != ""
	h := &nameHeap{largestOnTop: !back}
	for {
		chunk, err := read(readChunk)
		for _, name := range chunk {
			switch {
			case !back && p.after != "" && name <= p.after:
				earlier = true
				continue
			case back && name >= p.before:
				later = true
				continue
			}
			if h.Len() < p.limit {
				heap.Push(h, name)
				continue
			}
			if h.outranks(name) {
				h.names[0] = name
				heap.Fix(h, 0)
			}
			if back {
				earlier = true
			} else {
				later = true
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, false, err
		}
		if len(chunk) == 0 {
			break
		}
	}
	names = make([]string, h.Len())
	for i := range names {
		n := heap.Pop(h).(string)
		if back {
			names[i] = n // the smallest first
		} else {
			names[len(names)-1-i] = n // the largest first
		}
	}
	return names, earlier, later, nil
}

// nameHeap keeps the page's names with the one to drop first on top: the
// largest when paging forward (a smaller name replaces it), the smallest
// when paging back.
type nameHeap struct {
	names        []string
	largestOnTop bool
}

func (h *nameHeap) outranks(name string) bool {
	if h.largestOnTop {
		return name < h.names[0]
	}
	return name > h.names[0]
}

func (h nameHeap) Len() int { return len(h.names) }
func (h nameHeap) Less(i, j int) bool {
	if h.largestOnTop {
		return h.names[i] > h.names[j]
	}
	return h.names[i] < h.names[j]
}
func (h nameHeap) Swap(i, j int) { h.names[i], h.names[j] = h.names[j], h.names[i] }
func (h *nameHeap) Push(x any)   { h.names = append(h.names, x.(string)) }
func (h *nameHeap) Pop() any {
	x := h.names[len(h.names)-1]
	h.names = h.names[:len(h.names)-1]
	return x
}
