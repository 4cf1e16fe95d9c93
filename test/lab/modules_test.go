package lab

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseModinfo(t *testing.T) {
	section := []byte("alias=net-pf-16-proto-16-family-IPVS\x00depends=nf_conntrack,nf_defrag_ipv6,libcrc32c\x00" +
		"license=GPL\x00\x00\x00alias=ip_vs\x00name=ip_vs\x00")
	got := parseModinfo("ip_vs", "kernel/net/netfilter/ipvs/ip_vs.ko", section)
	want := moduleInfo{
		Name:    "ip_vs",
		Path:    "kernel/net/netfilter/ipvs/ip_vs.ko",
		Depends: []string{"nf_conntrack", "nf_defrag_ipv6", "libcrc32c"},
		Aliases: []string{"net-pf-16-proto-16-family-IPVS", "ip_vs"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseModinfo (-want +got):\n%s", diff)
	}
}

func TestRenderModulesDep(t *testing.T) {
	mod := func(name string, deps ...string) moduleInfo {
		return moduleInfo{Name: name, Path: "k/" + name + ".ko", Depends: deps}
	}
	tests := []struct {
		name    string
		mods    []moduleInfo
		want    string
		wantErr bool
	}{
		{
			name: "no dependencies",
			mods: []moduleInfo{mod("veth"), mod("dummy")},
			want: "k/dummy.ko:\nk/veth.ko:\n",
		},
		{
			// Loading right to left must bring every dependency before its
			// users: libcrc32c and nf_defrag before nf_conntrack before ip_vs.
			name: "transitive, deepest last",
			mods: []moduleInfo{
				mod("ip_vs_rr", "ip_vs"),
				mod("ip_vs", "nf_conntrack", "libcrc32c"),
				mod("nf_conntrack", "nf_defrag", "libcrc32c"),
				mod("nf_defrag"),
				mod("libcrc32c"),
			},
			want: "k/ip_vs.ko: k/nf_conntrack.ko k/libcrc32c.ko k/nf_defrag.ko\n" +
				"k/ip_vs_rr.ko: k/ip_vs.ko k/nf_conntrack.ko k/libcrc32c.ko k/nf_defrag.ko\n" +
				"k/libcrc32c.ko:\n" +
				"k/nf_conntrack.ko: k/libcrc32c.ko k/nf_defrag.ko\n" +
				"k/nf_defrag.ko:\n",
		},
		{
			name:    "missing dependency",
			mods:    []moduleInfo{mod("ip_vs", "nf_conntrack")},
			wantErr: true,
		},
		{
			name:    "cycle",
			mods:    []moduleInfo{mod("a", "b"), mod("b", "a")},
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := map[string]moduleInfo{}
			for _, m := range tc.mods {
				set[m.Name] = m
			}
			got, err := renderModulesDep(set)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("modules.dep (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderModulesAlias(t *testing.T) {
	got := renderModulesAlias(map[string]moduleInfo{
		"ip_vs_rr": {Name: "ip_vs_rr", Aliases: []string{"ip_vs_sched_rr"}},
		"dummy":    {Name: "dummy", Aliases: []string{"rtnl-link-dummy"}},
	})
	want := "alias rtnl-link-dummy dummy\nalias ip_vs_sched_rr ip_vs_rr\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("modules.alias (-want +got):\n%s", diff)
	}
}
