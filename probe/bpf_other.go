//go:build !(linux && (amd64 || arm64))

package probe

import (
	"fmt"

	"github.com/probeopt/probeopt/bpf"
)

// bpfState is empty where programs cannot run at probes.
type bpfState struct{}

func loadBPF(t *Tracer, obj *bpf.Object, o *BPFOptions) (*BPF, error) {
	return nil, fmt.Errorf("load BPF: %w", ErrNotSupported)
}

func attachBPF(b *BPF, prog, spec string, cookie uint64, usdt *bpf.USDTLink) (*Probe, func(), error) {
	return nil, nil, fmt.Errorf("attach BPF: %w", ErrNotSupported)
}
