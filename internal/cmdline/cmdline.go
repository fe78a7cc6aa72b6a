// Package cmdline parses the command line of every runplane binary the same
// way: the binary's own flags plus -log-format, -log-level and -version;
// -help prints the usage on stdout (it is what was asked for) and exits 0, a
// bad flag prints the error and the usage on stderr and exits 2. The logger
// the log flags select becomes the process's only log sink (internal/logging).
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/runplane/runplane/internal/buildinfo"
	"github.com/runplane/runplane/internal/logging"
)

// Parse parses args (without the program name) into fs, whose own flags are
// already defined, and returns the installed logger. defaults are the log
// flags' defaults (the zero value: JSON at info). It exits on -help, -version
// and bad flags.
func Parse(fs *flag.FlagSet, args []string, defaults logging.Options) *slog.Logger {
	l, code, done := parse(fs, args, defaults, os.Stdout, os.Stderr)
	if done {
		os.Exit(code)
	}
	logging.Install(l)
	return l
}

// parse is Parse without the exits: done says the process should exit with
// code.
func parse(fs *flag.FlagSet, args []string, defaults logging.Options, stdout, stderr io.Writer) (_ *slog.Logger, code int, done bool) {
	opts := defaults
	if opts.Format == "" {
		opts.Format = logging.FormatJSON
	}
	if opts.Level == "" {
		opts.Level = "info"
	}
	fs.StringVar(&opts.Format, "log-format", opts.Format, "log format: json or text")
	fs.StringVar(&opts.Level, "log-level", opts.Level, "log level: debug, info, warn or error")
	version := fs.Bool("version", false, "print the version and exit")
	// The flag package prints errors and the usage to fs.Output() and exits
	// by itself unless told otherwise; take both decisions here instead.
	name := filepath.Base(fs.Name()) // flag.CommandLine's name is os.Args[0], a path
	fs.Init(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return nil, 0, true
	case err != nil: // the flag package has printed the error
		usage(stderr)
		return nil, 2, true
	case *version:
		fmt.Fprintf(stdout, "%s %s\n", fs.Name(), buildinfo.Get())
		return nil, 0, true
	}
	l, err := logging.New(stderr, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return nil, 2, true
	}
	return l, 0, false
}
