//go:build !linux

package launcher

import (
	"errors"
	"os"
)

var forwarded []os.Signal

func run(Config) (int, error) {
	return ExitStartFailed, errors.New("launcher: runs on Linux only (it is a container's init)")
}
