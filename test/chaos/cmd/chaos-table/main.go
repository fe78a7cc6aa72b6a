// Command chaos-table prints the rows the chaos cases appended (JSON lines
// on stdin, see chaos.AppendRow) as one table: the last step of make chaos.
package main

import (
	"fmt"
	"os"

	"github.com/runplane/runplane/test/chaos"
)

func main() {
	rows, err := chaos.ReadRows(os.Stdin)
	if err == nil {
		err = chaos.PrintTable(os.Stdout, rows)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos-table:", err)
		os.Exit(1)
	}
}
