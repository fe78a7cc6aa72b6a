// Command admgen writes the chart's admission templates from the webhook's
// Go definitions (package admgen).
//
//	go run ./hack/admgen/cmd/admgen [-chart charts/runplane]
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/runplane/runplane/hack/admgen"
)

func main() {
	chart := flag.String("chart", "charts/runplane", "the chart's directory")
	flag.Parse()
	if err := run(*chart); err != nil {
		fmt.Fprintln(os.Stderr, "admgen:", err)
		os.Exit(1)
	}
}

func run(chart string) error {
	files, err := admgen.Files()
	if err != nil {
		return err
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(chart, path), files[path], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(chart, path))
	}
	return nil
}
