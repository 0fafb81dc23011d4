package bpf

import (
	"errors"
	"testing"
)

// The section names and what libbpf's documentation (libbpf's
// program-types page: uprobe, uretprobe, usdt and their .s forms) says
// each means.
func TestParseSection(t *testing.T) {
	for _, c := range []struct {
		name string
		want Section
	}{
		{"uprobe/libc.so.6:malloc", Section{Kind: Uprobe, Path: "libc.so.6", Symbol: "malloc"}},
		{"uprobe//usr/bin/bash:readline+0x10", Section{Kind: Uprobe, Path: "/usr/bin/bash", Symbol: "readline", Offset: 0x10}},
		{"uprobe/./a.out:work+4", Section{Kind: Uprobe, Path: "./a.out", Symbol: "work", Offset: 4}},
		{"uprobe//bin/x:0x1234", Section{Kind: Uprobe, Path: "/bin/x", Offset: 0x1234}},
		{"uretprobe//bin/true:main", Section{Kind: Uretprobe, Path: "/bin/true", Symbol: "main"}},
		{"uprobe.s/libc.so.6:free", Section{Kind: Uprobe, Sleepable: true, Path: "libc.so.6", Symbol: "free"}},
		{"usdt/./a.out:prov:name", Section{Kind: USDT, Path: "./a.out", Provider: "prov", Name: "name"}},
		{"usdt//usr/bin/python3:python:function__entry", Section{Kind: USDT, Path: "/usr/bin/python3", Provider: "python", Name: "function__entry"}},
		{"uprobe", Section{Kind: Uprobe, Manual: true}},
		{"uretprobe", Section{Kind: Uretprobe, Manual: true}},
		{"usdt", Section{Kind: USDT, Manual: true}},
	} {
		got, err := ParseSection(c.name)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.name && c.name != "uprobe/./a.out:work+4" {
			t.Errorf("%s: String %q", c.name, s)
		}
	}
	for _, bad := range []string{"kprobe/do_sys_open", "xdp", "tracepoint/syscalls/sys_enter_open",
		"uprobe/libc.so.6", "uprobe/:malloc", "uprobe/libc.so.6:", "usdt/a.out:prov", "usdt/a.out::name",
		"uprobe/libc.so.6:malloc+zz", "uprobe/x:0xzz"} {
		if s, err := ParseSection(bad); !errors.Is(err, ErrSection) {
			t.Errorf("%s: %+v, %v; want ErrSection", bad, s, err)
		}
	}
}
