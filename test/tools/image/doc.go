// Command image builds the switchyard container image without Docker or a
// registry (make image): one layer holding the static binaries under
// /usr/local/bin, the daemon as ENTRYPOINT, OCI labels naming the source
// and the version. It writes the image twice, as an OCI image layout
// directory and as a docker-archive tarball (what `ctr images import` and
// `docker load` read), tagged with every -tag given.
//
// The image is reproducible: file modes, owners and times in the layer and
// the config's creation time are fixed (-created, Unix seconds), so the
// same binaries and flags give the same digest. It is a build tool, not a
// product binary, so it lives under test/tools rather than cmd/.
package main
