// Package images builds runplane's container images without a Docker engine:
// from static binaries on this machine into OCI images with
// go-containerregistry (mutate for config and layers, layout for the OCI
// image layout), written as one OCI archive that `ctr images import` and
// registries' tools read. Nothing is pulled: every byte comes from files
// built or installed here.
//
// The set (see Standard): the runplane image the chart uses (every binary,
// user 65532), a pause image for Pod sandboxes and stock placeholders,
// framework-echo, and a small user image with busybox's shell and
// coreutils for SSH and prepare flows.
package images
