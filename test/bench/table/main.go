// Command table reads `go test -bench` output on stdin and prints one row
// per benchmark and metric: the median over the runs (-count) and, where a
// sibling sub-benchmark named "baseline" measured the same metric in the
// same run, the ratio to it. Machines are shared and noisy, so medians and
// same-run ratios are the figures to quote.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// sample is one metric of one benchmark in one package.
type sample struct {
	pkg, bench, unit string
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	values, order, err := parse(in)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "package\tbenchmark\tmetric\tmedian\truns\tvs baseline\t")
	for _, s := range order {
		med := median(values[s])
		ratio := ""
		if base, ok := baselineOf(s); ok && base != s {
			if bv, ok := values[base]; ok && median(bv) != 0 {
				ratio = fmt.Sprintf("%.2fx", med/median(bv))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t\n", shortPkg(s.pkg), s.bench, s.unit, format(med), len(values[s]), ratio)
	}
	return tw.Flush()
}

// parse collects every metric of every Benchmark line, keyed by package.
func parse(in io.Reader) (map[sample][]float64, []sample, error) {
	values := map[sample][]float64{}
	var order []sample
	pkg := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(rest)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // a log line that starts with "Benchmark"
		}
		name := trimProcs(fields[0])
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			s := sample{pkg: pkg, bench: name, unit: fields[i+1]}
			if _, seen := values[s]; !seen {
				order = append(order, s)
			}
			values[s] = append(values[s], v)
		}
	}
	return values, order, sc.Err()
}

// trimProcs drops the -GOMAXPROCS suffix go test adds to benchmark names.
func trimProcs(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// baselineOf names the "baseline" sibling of a sub-benchmark.
func baselineOf(s sample) (sample, bool) {
	i := strings.LastIndex(s.bench, "/")
	if i < 0 {
		return sample{}, false
	}
	return sample{pkg: s.pkg, bench: s.bench[:i] + "/baseline", unit: s.unit}, true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/runplane/runplane/") }
