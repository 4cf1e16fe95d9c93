package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var bins, tags listFlag
	fs.Var(&bins, "bin", "NAME=PATH: a static binary to put in "+binDir+" (repeatable)")
	fs.Var(&tags, "tag", "a reference to tag the image with, e.g. switchyard:dev (repeatable)")
	entrypoint := fs.String("entrypoint", "switchyard", "the binary the container runs")
	version := fs.String("version", "dev", "the org.opencontainers.image.version label")
	source := fs.String("source", "https://github.com/switchyard-lb/switchyard", "the org.opencontainers.image.source label")
	revision := fs.String("revision", "", "the org.opencontainers.image.revision label (the commit), if set")
	arch := fs.String("arch", runtime.GOARCH, "the binaries' GOARCH")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time and file times, Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	ociDir := fs.String("oci", "", "write an OCI image layout to this directory (replaced)")
	archive := fs.String("tar", "", "write a docker-archive tarball to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *ociDir == "" && *archive == "" {
		return fmt.Errorf("nothing to write: give -oci, -tar or both")
	}
	s := spec{Entrypoint: *entrypoint, Version: *version, Source: *source, Revision: *revision, Arch: *arch}
	for _, b := range bins {
		n, p, ok := strings.Cut(b, "=")
		if !ok || n == "" || p == "" || strings.Contains(n, "/") {
			return fmt.Errorf("-bin %q: want NAME=PATH", b)
		}
		s.Binaries = append(s.Binaries, binary{Name: n, Path: p})
	}
	secs := int64(0)
	if *created != "" {
		var err error
		if secs, err = strconv.ParseInt(*created, 10, 64); err != nil {
			return fmt.Errorf("-created %q: %w", *created, err)
		}
	}
	s.Created = time.Unix(secs, 0).UTC()
	refs, err := parseTags(tags)
	if err != nil {
		return err
	}

	img, err := build(s)
	if err != nil {
		return err
	}
	if *ociDir != "" {
		if err := writeLayout(*ociDir, img, refs); err != nil {
			return err
		}
	}
	if *archive != "" {
		if err := writeArchive(*archive, img, refs, s.Created); err != nil {
			return err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var compressed int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return err
		}
		compressed += n
	}
	fmt.Printf("image %s %s (%d MB compressed)\n", tags, digest, (compressed+1<<19)>>20)
	return nil
}
