// Package configfile is the one mechanism behind runplane's versioned
// configuration files (QueueConfiguration, WebhookConfiguration,
// ControllerConfiguration, ExtenderConfiguration; apiVersion
// runplane.io/v1alpha1, in the style of kube-scheduler's
// KubeSchedulerConfiguration): a YAML or JSON document decoded strictly, so
// an unknown or duplicate key is an error naming its path; its apiVersion
// and kind checked; then defaulted and validated by the type's own Default
// and Validate. Each binary's config package keeps only its types, defaults
// and validation; New, Load and Decode here serve them all.
package configfile

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// APIVersion is every runplane configuration file's apiVersion.
const APIVersion = "runplane.io/v1alpha1"

// Object is a configuration type T as its pointer: a TypeMeta (embedded),
// its defaults (zero fields only, so applying them twice changes nothing)
// and its validation, each error naming its key.
type Object[T any] interface {
	*T
	GetObjectKind() schema.ObjectKind
	Default()
	Validate() error
}

// Kind is T's kind: its Go type's name, as runtime.Scheme names the kinds
// it registers.
func Kind[T any]() string { return reflect.TypeFor[T]().Name() }

// New is T's default configuration, apiVersion and kind set.
func New[T any, P Object[T]]() *T {
	c := new(T)
	P(c).GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(APIVersion, Kind[T]()))
	P(c).Default()
	return c
}

// Load reads, decodes, defaults and validates the file at path (Decode).
func Load[T any, P Object[T]](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Kind[T](), err)
	}
	c, err := Decode[T, P](b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", Kind[T](), path, err)
	}
	return c, nil
}

// Decode decodes a document strictly (an unknown or duplicate key is an
// error naming it), requires apiVersion and kind, defaults and validates it.
func Decode[T any, P Object[T]](b []byte) (*T, error) {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, err
	}
	c := new(T)
	// sigs.k8s.io/json, as the API machinery decodes strictly: an unknown
	// key's error names its path.
	strict, err := kjson.UnmarshalStrict(j, c)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	if v, k := P(c).GetObjectKind().GroupVersionKind().ToAPIVersionAndKind(); v != APIVersion || k != Kind[T]() {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, %s", v, k, APIVersion, Kind[T]())
	}
	P(c).Default()
	if err := P(c).Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// FromFile is Load, or with no path the defaults (New), validated too: the
// defaults alone may lack what an install must set (an image).
func FromFile[T any, P Object[T]](path string) (*T, error) {
	if path != "" {
		return Load[T, P](path)
	}
	c := New[T, P]()
	if err := P(c).Validate(); err != nil {
		return nil, fmt.Errorf("%s (no file): %w", Kind[T](), err)
	}
	return c, nil
}

// WriteFile writes c as a configuration file (tests and harnesses that run
// a binary).
func WriteFile(path string, c any) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("configuration file %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("configuration file: %w", err)
	}
	return nil
}

// OrDuration sets a zero *d to def: a Default's duration fields.
func OrDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}
