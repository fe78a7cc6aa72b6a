// Command pause is the pause image's only binary: it holds a Pod sandbox (or
// a stock placeholder) open until it is told to stop, and then exits at once
// so a terminating placeholder frees its node without waiting for SIGKILL.
// Go's signal handling replaces the C pause of Kubernetes, which we cannot
// build here without a C toolchain in the image build.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
