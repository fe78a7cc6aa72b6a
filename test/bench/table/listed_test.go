package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryBenchmarkIsListed keeps make bench honest: a Benchmark function
// that no line of test/bench/benchmarks.txt selects would never be run.
func TestEveryBenchmarkIsListed(t *testing.T) {
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	type line struct {
		pkg string
		re  *regexp.Regexp
	}
	var lines []line
	f, err := os.Open(filepath.Join(root, "test", "bench", "benchmarks.txt"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		lines = append(lines, line{pkg: filepath.Clean(fields[0]), re: regexp.MustCompile("^" + fields[1])})
	}
	decl := regexp.MustCompile(`(?m)^func (Benchmark\w*)\(b \*testing\.B\)`)
	found := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testbin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range decl.FindAllStringSubmatch(string(data), -1) {
			found++
			assert.True(t, slices.ContainsFunc(lines, func(l line) bool { return l.pkg == rel && l.re.MatchString(m[1]) }),
				"%s in ./%s is not selected by any line of test/bench/benchmarks.txt", m[1], rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, found, "found no Benchmark functions at all: is the walk rooted right?")
}
