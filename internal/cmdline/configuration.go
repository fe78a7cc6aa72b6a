package cmdline

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/logging"
)

// Configuration parses the command line of a binary whose settings are one
// configuration file of kind T: -config (its path; unset, T's defaults)
// besides Parse's log flags, which it returns with the logger. docs names
// where the kind is documented (-help shows it). A file that does not load,
// or defaults without what an install must set, is a bad configuration
// (Usage).
func Configuration[T any, P configfile.Object[T]](fs *flag.FlagSet, args []string, docs string) (*T, *slog.Logger, error) {
	path := fs.String("config", "", fmt.Sprintf("the configuration file (apiVersion %s, kind %s; %s); empty: the defaults",
		configfile.APIVersion, configfile.Kind[T](), docs))
	log := Parse(fs, args, logging.Options{})
	c, err := configfile.FromFile[T, P](*path)
	if err != nil {
		return nil, nil, Usage(err)
	}
	return c, log, nil
}
