// Package sshserver is runplane's SSH server: a key-only SSH server for GPU
// dev-box Pods built on golang.org/x/crypto/ssh, run inside the Pod's main
// container by the launcher (package launcher). It offers an interactive
// shell with a PTY, exec, the SFTP subsystem and local port forwarding to the
// Pod's own addresses; remote forwarding is off unless enabled. Keys come from
// an authorized_keys file that is re-read when it changes (a Kubernetes Secret
// volume swaps a symlink, so the file is polled by content, not watched by
// inode), and the host key is generated once into a file and reused so it
// stays stable for the Pod's life.
//
// Key options follow OpenSSH: keyopts.go and patterns.go parse and evaluate
// them (pure), grants.go carries a key's options through ssh.Permissions to
// the channel handlers, which enforce them. A line with an option that is not
// implemented is refused, never ignored. limits.go bounds channels per
// connection and connections still in the handshake.
package sshserver
