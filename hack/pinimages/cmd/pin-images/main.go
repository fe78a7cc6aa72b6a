// Command pin-images writes the current digests of the chart's third-party
// images into its values.yaml (package pinimages).
//
//	go run ./hack/pinimages/cmd/pin-images [-values charts/runplane/values.yaml]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/runplane/runplane/hack/pinimages"
)

func main() {
	path := flag.String("values", "charts/runplane/values.yaml", "the values file to pin")
	flag.Parse()
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "pin-images:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := pinimages.Pin(context.Background(), in, pinimages.Registries{}.Resolve)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	fmt.Println("pinned", pinimages.Images, "in", path)
	return nil
}
