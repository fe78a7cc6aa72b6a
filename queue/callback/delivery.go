package callback

import (
	"cmp"
	"fmt"
)

// Delivery is how callbacks are sent: the callbacks section of
// runplane-queue's configuration file beside the signing key (queue/config
// embeds it as it is), defaulted here only.
type Delivery struct {
	// AllowCIDRs are target ranges let through although not public (an
	// in-cluster receiver the operator vouches for); DenyCIDRs are refused
	// although public (e.g. the cluster's Pod and Service ranges when they
	// are public addresses).
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`
	DenyCIDRs  []string `json:"denyCIDRs,omitempty"`
	// MaxAttempts bounds the POSTs of one callback (default 6).
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// Workers bounds the POSTs in flight, all namespaces (default 8).
	Workers int `json:"workers,omitempty"`
	// NamespaceWorkers bounds the POSTs in flight of one namespace
	// (default 2, at most Workers): a tenant whose targets hang holds no
	// more workers than that, the others serve the other namespaces.
	NamespaceWorkers int `json:"namespaceWorkers,omitempty"`
}

// Default fills the zero fields.
func (d *Delivery) Default() {
	d.MaxAttempts = cmp.Or(d.MaxAttempts, 6)
	d.Workers = cmp.Or(d.Workers, 8)
	d.NamespaceWorkers = min(cmp.Or(d.NamespaceWorkers, 2), d.Workers)
}

// Targets are the target rules of AllowCIDRs and DenyCIDRs.
func (d Delivery) Targets() (Targets, error) {
	allow, err := ParsePrefixes(d.AllowCIDRs)
	if err != nil {
		return Targets{}, fmt.Errorf("allowed ranges: %w", err)
	}
	deny, err := ParsePrefixes(d.DenyCIDRs)
	if err != nil {
		return Targets{}, fmt.Errorf("denied ranges: %w", err)
	}
	return Targets{Allow: allow, Deny: deny}, nil
}
