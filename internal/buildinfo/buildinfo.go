// Package buildinfo is the version of a runplane binary: stamped at build
// (go build -ldflags "-X github.com/runplane/runplane/internal/buildinfo.version=v1.2.3",
// as the Makefile and the Dockerfile do) or, when not stamped, read from the
// module and VCS information the Go toolchain embeds. It also exports the
// runplane_build_info metric every binary serves.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set by the linker (-X); the only way to stamp a binary at build
// time, hence a package variable that nothing writes at run time.
var version string

// Info describes the running binary.
type Info struct {
	Version   string // the stamped version, the module version, or "devel"
	Revision  string // VCS commit, "" when unknown
	Modified  bool   // built from a work tree with uncommitted changes
	GoVersion string
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(version, bi)
}

// fromBuildInfo prefers the stamped version, then the main module's version
// (set by `go install module@version`), then "devel".
func fromBuildInfo(stamped string, bi *debug.BuildInfo) Info {
	info := Info{Version: stamped, GoVersion: runtime.Version()}
	if bi == nil {
		if info.Version == "" {
			info.Version = "devel"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	return info
}

// String is the one line --version prints.
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" {
		s += " (" + i.Revision
		if i.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + i.GoVersion
}

// Collector is the runplane_build_info gauge: always 1, labelled with the
// version, revision and Go version (the Prometheus build_info convention, so
// a query can join it to any series of the same instance).
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "runplane_build_info",
		Help: "Always 1; labels: the binary's version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
