package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// Row is one line of the chaos table.
type Row struct {
	Case      string  `json:"case"`
	Rate      float64 `json:"rate"`
	Duration  string  `json:"duration"`
	Accepted  int     `json:"accepted"`
	Succeeded int     `json:"succeeded"`
	Failed    int     `json:"failed"`
	// FailedUnrun are failed invocations the framework never started.
	FailedUnrun int `json:"failedUnrun"`
	Lost        int `json:"lost"`
	RunTwice    int `json:"runTwice"`
	Restarted   int `json:"restarted"`
	// RSS is the queue's largest resident set seen, in MiB.
	RSS float64 `json:"rssMiB"`
	// Note carries a case's own figures (drain time, refusals…).
	Note string `json:"note,omitempty"`
}

// NewRow fills a row from a case's counts.
func NewRow(name string, rate float64, dur string, c Counts, rssBytes int64, note string) Row {
	return Row{Case: name, Rate: rate, Duration: dur, Accepted: c.Accepted, Succeeded: c.Succeeded, Failed: c.Failed, FailedUnrun: c.FailedUnrun,
		Lost: c.Lost, RunTwice: c.RunTwice, Restarted: c.Restarted, RSS: float64(rssBytes) / (1 << 20), Note: note}
}

// AppendRow appends r as a JSON line to path (the file make chaos prints
// the table from); an empty path does nothing.
func AppendRow(path string, r Row) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos rows: %w", err)
	}
	defer f.Close()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}

// ReadRows reads the JSON lines AppendRow wrote.
func ReadRows(in io.Reader) ([]Row, error) {
	var rows []Row
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("chaos rows: %q: %w", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}

// PrintTable prints rows as one aligned table.
func PrintTable(out io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\trate/s\tduration\taccepted\tsucceeded\tfailed\tof them never ran\tlost\trun twice\tstarted twice\tqueue RSS MiB\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%s\n", r.Case, r.Rate, r.Duration, r.Accepted, r.Succeeded, r.Failed, r.FailedUnrun,
			r.Lost, r.RunTwice, r.Restarted, r.RSS, r.Note)
	}
	return tw.Flush()
}
