package config

import (
	"context"
	"strings"

	"github.com/goccy/go-yaml"
)

// switchyard.dev/v1alpha1 differs from v1alpha2 in one place: the
// settings every dataplane shares sat under dataplane.ipvs, and v1alpha2
// moved them up to dataplane. Every other section is the same in both, so
// a v1alpha1 file is decoded into the same Config, with only its
// dataplane section read in the old layout (Dataplane.UnmarshalYAML) and
// converted. Validation runs on the converted Config, and its errors are
// mapped back to the paths the file used, so a line and a field name are
// what the user wrote.

// v1alpha1Moves are the settings v1alpha2 moved: each one's v1alpha1 path
// and its v1alpha2 path.
var v1alpha1Moves = []struct{ v1alpha1, v1alpha2 string }{
	{"dataplane.ipvs.syncPeriod", "dataplane.syncPeriod"},
	{"dataplane.ipvs.minSyncPeriod", "dataplane.minSyncPeriod"},
	{"dataplane.ipvs.masqueradeAll", "dataplane.masqueradeAll"},
	{"dataplane.ipvs.clusterCIDRs", "dataplane.clusterCIDRs"},
	{"dataplane.ipvs.nodePortAddresses", "dataplane.nodePortAddresses"},
}

// v1alpha2Only are the dataplane settings added after v1alpha1: a
// v1alpha1 file cannot set them and is converted with their defaults
// (detectLocal: ClusterCIDR when clusterCIDRs is set, NodeCIDR otherwise).
var v1alpha2Only = []string{"detectLocal", "forwardingMode", "dsr"}

// v1alpha1Dataplane is the dataplane section of a v1alpha1 file.
type v1alpha1Dataplane struct {
	Mode string       `yaml:"mode"`
	IPVS v1alpha1IPVS `yaml:"ipvs"`
}

// v1alpha1IPVS is v1alpha2's IPVS block with the shared settings it held.
type v1alpha1IPVS struct {
	IPVS              `yaml:",inline"`
	SyncPeriod        Duration          `yaml:"syncPeriod"`
	MinSyncPeriod     Duration          `yaml:"minSyncPeriod"`
	MasqueradeAll     bool              `yaml:"masqueradeAll"`
	ClusterCIDRs      []Prefix          `yaml:"clusterCIDRs"`
	NodePortAddresses NodePortAddresses `yaml:"nodePortAddresses"`
}

// convert returns the v1alpha2 form of a v1alpha1 dataplane section.
func (d *v1alpha1Dataplane) convert() Dataplane {
	return Dataplane{
		Mode:              d.Mode,
		SyncPeriod:        d.IPVS.SyncPeriod,
		MinSyncPeriod:     d.IPVS.MinSyncPeriod,
		MasqueradeAll:     d.IPVS.MasqueradeAll,
		ClusterCIDRs:      d.IPVS.ClusterCIDRs,
		NodePortAddresses: d.IPVS.NodePortAddresses,
		IPVS:              d.IPVS.IPVS,
	}
}

type versionKey struct{}

// UnmarshalYAML reads the dataplane section in the layout of the file's
// version (Parse puts it in ctx): v1alpha1's is converted.
func (d *Dataplane) UnmarshalYAML(ctx context.Context, unmarshal func(any) error) error {
	if v, _ := ctx.Value(versionKey{}).(string); v == APIVersionV1alpha1 {
		var old v1alpha1Dataplane
		if err := unmarshal(&old); err != nil {
			return err
		}
		*d = old.convert()
		return nil
	}
	type plain Dataplane // without this method
	return unmarshal((*plain)(d))
}

// v1alpha1Path returns the path in a v1alpha1 file of the setting at the
// v1alpha2 path p (which may continue past the moved field, as in
// "dataplane.clusterCIDRs[0]").
func v1alpha1Path(p string) string {
	for _, m := range v1alpha1Moves {
		if rest, ok := strings.CutPrefix(p, m.v1alpha2); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return m.v1alpha1 + rest
		}
	}
	return p
}

// movedHint explains an unknown field at path that is a moved setting
// written in the other version's layout, or returns "".
func movedHint(version, path string) string {
	for _, name := range v1alpha2Only {
		if version == APIVersionV1alpha1 && path == "dataplane."+name {
			return " (" + APIVersionV1alpha1 + " has no " + name + ": it was added in apiVersion " + APIVersion + ")"
		}
	}
	for _, m := range v1alpha1Moves {
		switch {
		case version == APIVersion && path == m.v1alpha1:
			return " (" + APIVersion + " has it at " + m.v1alpha2 + ": dataplane.ipvs holds only the IPVS dataplane's own settings)"
		case version == APIVersionV1alpha1 && path == m.v1alpha2:
			return " (" + APIVersionV1alpha1 + " has it at " + m.v1alpha1 + "; it is here in apiVersion " + APIVersion + ")"
		}
	}
	return ""
}

// Deprecation returns the warning a config file in a deprecated format
// deserves (data is the file's content), "" when its format is current or
// unknown. A v1alpha1 file is still read and converted; the daemon logs
// this once each time it reads one, at start and on each reload.
func Deprecation(data []byte) string {
	var head struct {
		APIVersion string `yaml:"apiVersion"`
	}
	if yaml.Unmarshal(data, &head) != nil || head.APIVersion != APIVersionV1alpha1 {
		return ""
	}
	moved := make([]string, len(v1alpha1Moves))
	for i, m := range v1alpha1Moves {
		moved[i] = strings.TrimPrefix(m.v1alpha1, "dataplane.ipvs.")
	}
	return "apiVersion " + APIVersionV1alpha1 + " is deprecated (read and converted): set apiVersion " + APIVersion +
		" and move dataplane.ipvs." + strings.Join(moved, ", ") + " up to dataplane, as deploy/config.yaml shows"
}
