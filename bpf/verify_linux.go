package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Verify loads every program into the running kernel as the type its
// section implies, with the object's maps created in the kernel, and
// keeps the instructions of those the kernel accepts. The first program
// the kernel refuses makes Verify fail with a *VerifierError (the log)
// wrapping ErrRejected; without privilege it fails with ErrPermission.
// The kernel's maps and programs are closed before it returns.
func (o *Object) Verify() error {
	spec := o.Spec.Copy()
	for _, p := range o.Programs {
		spec.Programs[p.Name].Type = ebpf.Kprobe
		spec.Programs[p.Name].AttachType = ebpf.AttachNone
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			name := ""
			for _, p := range o.Programs {
				if containsName(err.Error(), p.Name) {
					name = p.Name
				}
			}
			return &VerifierError{Program: name, Log: slices.Clone(ve.Log), Err: err}
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("verify in the kernel: %w: %w", ErrPermission, err)
		}
		return fmt.Errorf("verify in the kernel: %w", err)
	}
	defer coll.Close()
	for _, p := range o.Programs {
		p.Insns = slices.Clone(o.Spec.Programs[p.Name].Instructions)
	}
	return nil
}

// containsName reports whether msg names program name as cilium/ebpf's
// errors do ("program NAME: ...").
func containsName(msg, name string) bool {
	return len(msg) >= len("program ")+len(name) &&
		(msg[:len("program ")+len(name)] == "program "+name)
}
