module github.com/probeopt/probeopt

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.10
	golang.org/x/arch v0.33.0
	golang.org/x/sys v0.50.0
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
