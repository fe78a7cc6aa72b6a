// Command natsd runs nats-server from a configuration file, built from the
// nats-server module version runplane's go.mod pins: the chaos harness's
// fallback when the pinned nats-server binary of test/testbin is not built
// (RUNPLANE_TESTBIN_DIR unset). It is the same server code as that binary,
// in its own process, so the harness can SIGKILL and restart it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	conf := flag.String("c", "", "configuration file")
	flag.Parse()
	if err := run(*conf); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(conf string) error {
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return fmt.Errorf("config %s: %w", conf, err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.ConfigureLogger()
	// Run handles SIGTERM/SIGINT (a clean shutdown) as nats-server does.
	if err := server.Run(s); err != nil {
		return err
	}
	s.WaitForShutdown()
	return nil
}
