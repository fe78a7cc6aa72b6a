package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// WatchFiles loads certFile and keyFile (an error when they are unusable)
// and returns controller-runtime's certwatcher for them: its GetCertificate
// serves the newest pair, and once started (it is a manager Runnable) it
// reloads the files when they change. onLoad, when set, hears the leaf of
// every pair loaded, the first one included.
func WatchFiles(certFile, keyFile string, onLoad func(*x509.Certificate)) (*certwatcher.CertWatcher, error) {
	w, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate %s: %w", certFile, err)
	}
	if onLoad != nil {
		w.RegisterCallback(func(c tls.Certificate) {
			if c.Leaf != nil {
				onLoad(c.Leaf)
			}
		})
	}
	return w, nil
}
