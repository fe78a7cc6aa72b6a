package metricsauth

import "fmt"

// Settings is the metrics section of a component's configuration file
// (queue/config, controllers/config): where /metrics is served and where
// its certificate comes from. Each configuration defaults BindAddress.
type Settings struct {
	// BindAddress of /metrics ("0": not served, as controller-runtime's
	// metrics address).
	BindAddress string `json:"bindAddress,omitempty"`
	// TLSSecret is namespace/name of the Secret keeping a CA and the
	// /metrics certificate for TLSHosts (the chart's ServiceMonitor
	// verifies it); empty: a self-signed certificate.
	TLSSecret string   `json:"tlsSecret,omitempty"`
	TLSHosts  []string `json:"tlsHosts,omitempty"`
}

// ServingCert is where /metrics's certificate comes from.
func (s Settings) ServingCert() (ServingCert, error) {
	c := ServingCert{Hosts: s.TLSHosts}
	if err := c.ParseSecret(s.TLSSecret); err != nil {
		return ServingCert{}, err
	}
	return c, nil
}

// Validate names the key at fault, under the section's own key (e.g.
// "metrics").
func (s Settings) Validate(section string) error {
	if _, err := s.ServingCert(); err != nil {
		return fmt.Errorf("%s.tlsSecret: %w", section, err)
	}
	if s.TLSSecret != "" && len(s.TLSHosts) == 0 {
		return fmt.Errorf("%s.tlsHosts: needed with %s.tlsSecret (the names its certificate covers)", section, section)
	}
	return nil
}

// DevSettings is make dev's metrics section of component: DevCert's
// Secret and hosts, served on bindAddress.
func DevSettings(namespace, component, bindAddress string) Settings {
	c := DevCert(namespace, component)
	return Settings{BindAddress: bindAddress, TLSSecret: c.Secret.Namespace + "/" + c.Secret.Name, TLSHosts: c.Hosts}
}
