// Package sshserver is runplane's SSH sidecar: a key-only SSH server for GPU
// dev-box Pods built on golang.org/x/crypto/ssh. It offers an interactive
// shell with a PTY, exec, the SFTP subsystem and local port forwarding to the
// Pod's own addresses; remote forwarding is off unless enabled. Keys come from
// an authorized_keys file that is re-read when it changes (a Kubernetes Secret
// volume swaps a symlink, so the file is polled by content, not watched by
// inode), and the host key is generated once into a file and reused so it
// stays stable for the Pod's life.
package sshserver
