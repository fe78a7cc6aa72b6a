package cmdline

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/logging"
)

// Configuration parses the command line of a binary whose settings are one
// configuration file of kind T: -config (its path; unset, T's defaults)
// besides Parse's log flags, and returns the file with the logger. docs
// names where the kind is documented (-help shows it). A file that does not
// load, or defaults without what an install must set, is a bad
// configuration (Usage).
func Configuration[T any, P configfile.Object[T]](fs *flag.FlagSet, args []string, docs string) (*T, *slog.Logger, error) {
	path := configFlag(fs, fmt.Sprintf("the configuration file (apiVersion %s, kind %s; %s); empty: the defaults",
		configfile.APIVersion, configfile.Kind[T](), docs))
	log := Parse(fs, args, logging.Options{})
	c, err := configfile.FromFile[T, P](*path)
	if err != nil {
		return nil, nil, Usage(err)
	}
	return c, log, nil
}

// unexpected is the error of arguments after the flags: the flag package
// stops at the first, so a path given without -config (or any flag after
// it) would leave the binary on its defaults without a word.
func unexpected(fs *flag.FlagSet) error {
	return fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
}

func configFlag(fs *flag.FlagSet, usage string) *string { return fs.String("config", "", usage) }

// CheckConfigurationArgs parses args as Configuration parses a binary's
// command line, up to reading the file: each flag one it defines, the log
// flags' values valid. The chart's test proves with it, without building
// the binaries, that they take the arguments it passes them.
func CheckConfigurationArgs(name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configFlag(fs, "")
	opts, _ := logFlags(fs, logging.Options{})
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s %q: %w", name, args, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s %q: %w", name, args, unexpected(fs))
	}
	if _, err := logging.New(io.Discard, *opts); err != nil {
		return fmt.Errorf("%s %q: %w", name, args, err)
	}
	return nil
}
