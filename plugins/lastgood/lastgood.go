package lastgood

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// suffix names the files of a Dir.
const suffix = ".lastgood"

// maxRecord bounds a file's first line.
const maxRecord = 64 << 10

// Errors Load wraps.
var (
	// ErrNone: no version of the policy is kept.
	ErrNone = errors.New("no last good version kept")
	// ErrDamaged: the kept file cannot be trusted and is to be ignored.
	ErrDamaged = errors.New("damaged last good version")
)

// Version is one policy version kept on disk.
type Version struct {
	// Digest is the lowercase hex sha256 of Module.
	Digest string `json:"sha256"`
	// Revision is where it came from: its ConfigMap's resourceVersion.
	Revision string `json:"revision"`
	// Params are its default parameters (JSON), nil when none.
	Params json.RawMessage `json:"params,omitempty"`
	// Module is the uncompressed module.
	Module []byte `json:"-"`
}

// Dir keeps the last good version of each policy in a directory.
type Dir struct {
	path    string
	maxSize int64
}

// New returns the Dir at path, creating it (mode 0700) when missing and
// removing the temporary files a crash in Save left. maxModule caps the
// module Load accepts.
func New(path string, maxModule int64) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("last good policies: %w", err)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("last good policies: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") && e.Type().IsRegular() {
			_ = os.Remove(filepath.Join(path, e.Name()))
		}
	}
	return &Dir{path: path, maxSize: maxModule}, nil
}

// file is the path of name's file, or an error when name cannot be a
// file name (policy names are ConfigMap names, which always can).
func (d *Dir) file(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("last good version of policy %q: not a valid policy name", name)
	}
	return filepath.Join(d.path, name+suffix), nil
}

// Save keeps v as name's last good version, replacing the one kept. A
// crash leaves the old file or the new one, never a mix.
func (d *Dir) Save(name string, v Version) error {
	path, err := d.file(name)
	if err != nil {
		return err
	}
	rec, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(d.path, "."+name+".*")
	if err != nil {
		return fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	_, err = tmp.Write(append(append(rec, '\n'), v.Module...))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	return nil
}

// Load returns name's kept version: an error wrapping ErrNone when there
// is none, ErrDamaged when the file cannot be trusted.
func (d *Dir) Load(name string) (Version, error) {
	path, err := d.file(name)
	if err != nil {
		return Version{}, err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Version{}, fmt.Errorf("policy %s: %w", name, ErrNone)
	}
	if err != nil {
		return Version{}, fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+d.maxSize+1))
	if err != nil {
		return Version{}, fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	v, err := decode(b, d.maxSize)
	if err != nil {
		return Version{}, fmt.Errorf("%w of policy %s (%s): %w", ErrDamaged, name, path, err)
	}
	return v, nil
}

func decode(b []byte, maxSize int64) (Version, error) {
	rec, module, ok := bytes.Cut(b, []byte{'\n'})
	if !ok || len(rec) > maxRecord {
		return Version{}, errors.New("no record line")
	}
	var v Version
	dec := json.NewDecoder(bytes.NewReader(rec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Version{}, fmt.Errorf("record: %w", err)
	}
	if int64(len(module)) > maxSize {
		return Version{}, fmt.Errorf("module over the %d byte limit", maxSize)
	}
	if len(v.Params) > 0 && !json.Valid(v.Params) {
		return Version{}, errors.New("params are not JSON")
	}
	sum := sha256.Sum256(module)
	if got := hex.EncodeToString(sum[:]); got != v.Digest {
		return Version{}, fmt.Errorf("module sha256 %s, record says %q", got, v.Digest)
	}
	v.Module = module
	return v, nil
}

// Remove forgets name's kept version; none kept is not an error.
func (d *Dir) Remove(name string) error {
	path, err := d.file(name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("last good version of policy %s: %w", name, err)
	}
	return nil
}

// Names lists the policies with a kept version, sorted.
func (d *Dir) Names() ([]string, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("last good policies: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), suffix); ok && e.Type().IsRegular() && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
