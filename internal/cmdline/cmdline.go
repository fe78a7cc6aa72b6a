// Package cmdline is the runtime pattern of every runplane binary: its
// command line parsed the same way (the binary's own flags plus
// -log-format, -log-level and -version; -help prints the usage on stdout,
// it is what was asked for, and exits 0), the logger the log flags select
// made the process's only log sink (internal/logging), and its fatal error
// written by Exit through that logger. A bad flag is such a fatal error
// too: one record in the log format (JSON by default), exit code 2. A log
// pipeline needs the line that says why a process died in the format it
// parses, so nothing is printed in plain text.
//
//	func main() {
//		... flags ...
//		log := cmdline.Parse(fs, os.Args[1:], logging.Options{})
//		if err := run(...); err != nil {
//			cmdline.Exit(err) // cmdline.Usage(err) for a bad configuration: exit code 2
//		}
//	}
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
// flags' defaults (the zero value: JSON at info). It exits on -help, -version,
// bad flags and arguments after the flags (the flag package stops at the
// first: a flag after it would be ignored without a word).
func Parse(fs *flag.FlagSet, args []string, defaults logging.Options) *slog.Logger {
	return exitOr(parseFlags(fs, args, defaults, os.Stdout, os.Stderr, false))
}

// ParseCommand is Parse for a binary that takes arguments after its flags
// (runplane-ssh's command to launch): fs.Args() are the caller's.
func ParseCommand(fs *flag.FlagSet, args []string, defaults logging.Options) *slog.Logger {
	return exitOr(parseFlags(fs, args, defaults, os.Stdout, os.Stderr, true))
}

func exitOr(l *slog.Logger, code int, done bool) *slog.Logger {
	if done {
		os.Exit(code)
	}
	logging.Install(l)
	return l
}

// parseFlags is Parse (allowArgs: ParseCommand) without the exits: done
// says the process should exit with code.
func parseFlags(fs *flag.FlagSet, args []string, defaults logging.Options, stdout, stderr io.Writer, allowArgs bool) (_ *slog.Logger, code int, done bool) {
	opts, version := logFlags(fs, defaults)
	// The flag package prints errors and the usage to fs.Output() and exits
	// by itself unless told otherwise; take both decisions here instead.
	name := filepath.Base(fs.Name()) // flag.CommandLine's name is os.Args[0], a path
	fs.Init(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // its error is logged below; the usage is -help's
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil && !allowArgs && fs.NArg() > 0 {
		err = unexpected(fs)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "Usage of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, 0, true
	case err == nil && *version:
		fmt.Fprintf(stdout, "%s %s\n", fs.Name(), buildinfo.Get())
		return nil, 0, true
	}
	l, lerr := logging.New(stderr, *opts)
	if err == nil && lerr == nil {
		return l, 0, false
	}
	if lerr != nil {
		// The log flags themselves are wrong: the default format says so.
		l, _ = logging.New(stderr, logging.Options{Format: logging.FormatJSON, Level: "info"})
		err = errors.Join(err, lerr)
	}
	fail(l, fs.Name(), Usage(fmt.Errorf("%w (%s -help prints the flags)", err, fs.Name())))
	return nil, 2, true
}

// logFlags defines the log flags, with defaults (the zero value: JSON at
// info), and -version on fs.
func logFlags(fs *flag.FlagSet, defaults logging.Options) (*logging.Options, *bool) {
	opts := defaults
	if opts.Format == "" {
		opts.Format = logging.FormatJSON
	}
	if opts.Level == "" {
		opts.Level = "info"
	}
	fs.StringVar(&opts.Format, "log-format", opts.Format, "log format: json or text")
	fs.StringVar(&opts.Level, "log-level", opts.Level, "log level: debug, info, warn or error")
	return &opts, fs.Bool("version", false, "print the version and exit")
}

// usageError is a bad command line or configuration: exit code 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// Usage marks err as a bad command line or configuration (Exit's code 2;
// any other error exits 1).
func Usage(err error) error { return usageError{err} }

// Exit ends the process on its fatal error err: one record at ERROR
// through the logger Parse installed (slog's default), then exit code 2
// for a Usage error, 1 for any other.
func Exit(err error) {
	os.Exit(fail(slog.Default(), filepath.Base(os.Args[0]), err))
}

// fail logs err as name's fatal error and returns the exit code.
func fail(l *slog.Logger, name string, err error) int {
	code := 1
	if errors.As(err, new(usageError)) {
		code = 2
	}
	l.Error(name+" failed", "err", err.Error(), "exitCode", code)
	return code
}
