package storage

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFindCycle(t *testing.T) {
	long := map[string]source{}
	for i := range maxChain + 5 {
		long[fmt.Sprintf("p%d", i)] = source{from: fmt.Sprintf("p%d", i+1)}
	}
	tests := []struct {
		name      string
		start     string
		pvcs      map[string]source
		wantCycle []string
		wantLong  bool
	}{
		{name: "self", start: "a", pvcs: map[string]source{"a": {from: "a"}}, wantCycle: []string{"a", "a"}},
		{name: "pair", start: "a", pvcs: map[string]source{"a": {from: "b"}, "b": {from: "a"}}, wantCycle: []string{"a", "b", "a"}},
		{name: "triangle", start: "a", pvcs: map[string]source{"a": {from: "b"}, "b": {from: "c"}, "c": {from: "a"}}, wantCycle: []string{"a", "b", "c", "a"}},
		{name: "chain to an image", start: "a", pvcs: map[string]source{"a": {from: "b"}, "b": {from: "c"}, "c": {}}},
		{name: "missing source", start: "a", pvcs: map[string]source{"a": {from: "b"}}},
		{name: "ready member breaks it", start: "a", pvcs: map[string]source{"a": {from: "b"}, "b": {from: "a", ready: true}}},
		{name: "into another cycle", start: "a", pvcs: map[string]source{"a": {from: "b"}, "b": {from: "c"}, "c": {from: "b"}}},
		{name: "too long", start: "p0", pvcs: long, wantLong: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookups := 0
			cycle, isLong, err := findCycle(tt.start, tt.pvcs[tt.start].from, func(name string) (source, bool, error) {
				lookups++
				s, ok := tt.pvcs[name]
				return s, ok, nil
			})
			require.NoError(t, err)
			assert.Equal(t, tt.wantLong, isLong)
			assert.LessOrEqual(t, lookups, maxChain+1, "bounded")
			if tt.wantLong {
				assert.Contains(t, cycleMessage(cycle, isLong), "longer than 100 PVCs")
				return
			}
			assert.Equal(t, tt.wantCycle, cycle)
		})
	}
	_, _, err := findCycle("a", "b", func(string) (source, bool, error) { return source{}, false, errors.New("cache down") })
	assert.ErrorContains(t, err, "cache down")
}
