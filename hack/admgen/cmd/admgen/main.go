// Command admgen writes the chart's admission templates from the webhook's
// Go definitions (package admgen): go run ./hack/admgen/cmd/admgen [-chart dir].
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/runplane/runplane/hack/admgen"
)

func main() {
	chart := flag.String("chart", "charts/runplane", "the chart's directory")
	flag.Parse()
	files, err := admgen.Files()
	for path, data := range files {
		if err == nil {
			err = os.WriteFile(filepath.Join(*chart, path), data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "admgen:", err)
		os.Exit(1)
	}
}
