package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/probe"
	"github.com/probeopt/probeopt/proc"
)

// runOptions are the flags of "run".
type runOptions struct {
	json   bool
	output string
	pid    int
	attach []string // PROG=SPEC
}

// runLong is the long help of run.
const runLong = `Load the eBPF object OBJ.o (built by clang -target bpf against libbpf's
headers) into CMD (started after "--") or process PID, run its programs at
their probes without a trap, stream what they write to ring buffers while
the process runs, and print every map when it exits or probeopt gets SIGINT
or SIGTERM (then probeopt removes every probe and detaches, and the process
carries on untraced).

Every program is verified by the running kernel first, as the kprobe
program its section implies: a program the kernel rejects is an error with
the verifier's log, and without the privilege to load BPF programs (root,
or CAP_BPF with CAP_PERFMON) run fails before it touches the process. The
verified programs are compiled to x86-64 and run in the probes' trampoline
slots, with the kernel's struct pt_regs of the hit as their context (so
PT_REGS_PARM1, PT_REGS_RC and BPF_KPROBE work unchanged); their maps live
in memory probeopt shares with the process. A site that cannot take a
trampoline is refused with its reason: programs never run at a trap.

Each program attaches where its section says (uprobe/PATH:SYM[+OFF],
uretprobe/PATH:SYM, usdt/PATH:PROVIDER:NAME, as libbpf reads them: a PATH
that does not start with "/" or "." names a library by its base name,
"libc.so.6"), or where --attach PROG=SPEC says, SPEC being what trace takes
("work", "libc.so.6:malloc", "uprobe:/path/prog:parse",
"usdt:python:function__entry"); a uretprobe program attaches to the returns
of the functions SPEC names. A program in a bare "uprobe", "uretprobe" or
"usdt" section needs --attach.

A usdt program written with libbpf's usdt.bpf.h (BPF_USDT, bpf_usdt_arg,
bpf_usdt_arg_cnt, bpf_usdt_cookie) reads the arguments of the USDT probe it
runs at: probeopt fills the header's map __bpf_usdt_specs from each note's
argument string as libbpf's loader does, the site's cookie being the ID
of its note's specs, and raises the probe's semaphore. An argument libbpf
does not read (a symbol, "8@counter(%rip)"; an index register; a segment)
refuses the probe's sites in that file (bpf-usdt-argument), as libbpf
refuses the attachment. A program that cannot be attached (an
unknown program or symbol, every site refused) is an error: probeopt then
detaches from PID, or kills CMD, leaving no probe behind, and exits with
status 1.

The maps held: array, percpu_array, hash, lru_hash, percpu_hash, ringbuf
and perf_event_array (one ring for every thread); a per-CPU map has one value per thread stripe (threads running the
programs at once, 128). The helpers: map lookup, update and delete,
ktime_get_ns, ktime_get_boot_ns, get_current_pid_tgid, get_current_uid_gid,
get_current_comm, get_smp_processor_id, get_prandom_u32, probe_read_user(_str)
and probe_read(_str), probe_read_kernel (of the context and the program's
stack, which lie in the process here; a failed read returns the kernel's
error for the address), ringbuf_output, reserve, submit and discard,
perf_event_output (BPF_F_CURRENT_CPU),
get_func_ip (the probe's address; a uretprobe's function) and
get_attach_cookie (0: run sets no cookie; a usdt.bpf.h program's spec
ID), get_stack (user stacks by
frame pointers, as the kernel walks them), trace_printk (returns 0, not
the length of the line). A program
calling another helper is refused when it is compiled, naming it.

Output (standard output, or FILE with --output; CMD's own output is left as
it is): one line per ring buffer or perf buffer record while the process
runs, "MAP: HEX" (a perf record's raw sample, padded as the kernel pads it),
and one per trace_printk (bpf_printk) call, "trace_printk: LINE" (formatted
as the kernel formats it: %d %i %u %x %X %c %s %% %px with flags, width,
precision and l/ll; a %s string from a constant of the program);
at the end, per map (ring buffers aside), a line "map NAME TYPE key N value
M" and one line per entry, "  KEY: VALUE" in hex (a per-CPU map: the
values of every stripe, separated by spaces). With --json every line is a
JSON object: a record {"map": NAME, "data": HEX}; a trace_printk line
{"trace_printk": LINE}; a map {"map": NAME,
"type": TYPE, "key_size": N, "value_size": N, "entries": [{"key": HEX,
"value": HEX}]}, a per-CPU map's entries with "values": [HEX, ...] instead
of "value".

Exit status: CMD's when CMD exits with a status other than 0 (128+N when
signal N kills it); 1 when the object or a program cannot be used or
probeopt failed; 2 on a usage error; 0 otherwise.

Needs Linux on x86-64, the privilege to load BPF programs, and permission
to trace the process (ptrace).`

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] OBJ.o (-p PID | -- CMD [ARGS...])",
		Short: "Run the eBPF programs of an object at probes that never trap, and print its maps",
		Long:  runLong,
		Example: `  probeopt run mallocs.bpf.o -- ./server --port 8080
  probeopt run --json -o maps.json --attach count=libc.so.6:malloc counter.bpf.o -p 1234`,
		Args: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			objs, argv := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				objs, argv = args[:dash], args[dash:]
			}
			if err := o.check(objs, argv); err != nil {
				return err
			}
			return runRun(cmd, &o, objs[0], argv)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print the records and the maps as JSON lines")
	f.StringVarP(&o.output, "output", "o", "", "write the records and the maps to `FILE` instead of standard output")
	f.IntVarP(&o.pid, "pid", "p", 0, "attach to the running process `PID`")
	f.StringArrayVar(&o.attach, "attach", nil, "attach program PROG at the sites of SPEC (`PROG=SPEC`, repeatable), instead of its section's target")
	return cmd
}

// check checks the command line of run.
func (o *runOptions) check(objs, argv []string) error {
	switch {
	case len(objs) == 0:
		return usagef("run: missing OBJ.o argument")
	case len(objs) > 1:
		return usagef("run: one object, not %d (%s)", len(objs), strings.Join(objs, " "))
	}
	if err := checkProcessArgs("run", o.pid, argv); err != nil {
		return err
	}
	for _, a := range o.attach {
		if p, s, ok := strings.Cut(a, "="); !ok || p == "" || s == "" {
			return usagef("run: --attach %q (want PROG=SPEC)", a)
		}
	}
	return nil
}

// runRecord and runMap are the JSON lines of run.
type runRecord struct {
	Map  string `json:"map"`
	Data string `json:"data"`
}

type runMap struct {
	Map       string        `json:"map"`
	Type      string        `json:"type"`
	KeySize   int           `json:"key_size"`
	ValueSize int           `json:"value_size"`
	Entries   []runMapEntry `json:"entries"`
	Error     string        `json:"error,omitempty"`
}

type runMapEntry struct {
	Key    string   `json:"key"`
	Value  string   `json:"value,omitempty"`
	Values []string `json:"values,omitempty"`
}

// mapTypeNames are the map types as libbpf names them.
var mapTypeNames = map[ebpf.MapType]string{
	ebpf.Array: "array", ebpf.PerCPUArray: "percpu_array", ebpf.Hash: "hash",
	ebpf.LRUHash: "lru_hash", ebpf.PerCPUHash: "percpu_hash", ebpf.RingBuf: "ringbuf", ebpf.PerfEventArray: "perf_event_array",
}

// runOut writes run's lines, one at a time.
type runOut struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	err  error
}

func (r *runOut) line(v any, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	if r.json {
		r.err = json.NewEncoder(r.w).Encode(v)
		return
	}
	_, r.err = io.WriteString(r.w, text)
}

// runRun loads the object, starts or attaches to the process, attaches
// the programs, streams the records until the process ends or a signal
// comes, and prints the maps.
func runRun(cmd *cobra.Command, o *runOptions, objPath string, argv []string) error {
	stderr := cmd.ErrOrStderr()
	out := &runOut{w: cmd.OutOrStdout(), json: o.json}
	obj, err := bpf.Open(objPath)
	if err != nil {
		return err
	}
	attach := map[string]string{}
	for _, a := range o.attach {
		p, s, _ := strings.Cut(a, "=")
		if obj.Program(p) == nil {
			return fmt.Errorf("--attach %s: no program %q in %s", a, p, objPath)
		}
		attach[p] = s
	}
	for _, p := range obj.Programs {
		if _, ok := attach[p.Name]; !ok && p.Section.Manual {
			return fmt.Errorf("program %s of section %s names no target: give --attach %s=SPEC", p.Name, p.Section, p.Name)
		}
	}
	// The kernel's verdict before the process is touched.
	if err := obj.Verify(); err != nil {
		var ve *bpf.VerifierError
		if errors.As(err, &ve) {
			for _, l := range ve.Log {
				fmt.Fprintf(stderr, "probeopt: verifier: %s\n", l)
			}
		}
		return err
	}
	if o.output != "" {
		f, err := os.Create(o.output)
		if err != nil {
			return err
		}
		defer f.Close()
		out.w = f
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var tr *probe.Tracer
	if o.pid != 0 {
		tr, err = probe.Attach(o.pid, nil)
	} else {
		tr, err = probe.Spawn(argv, &probe.SpawnOptions{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	}
	if err != nil {
		return traceStartError(err, o.pid)
	}
	// From here on a failure leaves nothing behind: the probes go with
	// a detach, or the process with a kill.
	abandon := func() {
		if o.pid != 0 {
			tr.Detach()
		} else {
			tr.Kill()
		}
	}
	b, err := tr.LoadBPF(obj, nil)
	if err != nil {
		abandon()
		return err
	}
	for _, p := range obj.Programs {
		if _, err := b.Attach(p.Name, attach[p.Name], nil); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(stderr, "probeopt: program %s: %s\n", p.Name, line)
			}
			abandon()
			return errReported
		}
	}
	for _, p := range tr.Stats().Probes {
		for _, r := range p.Refused {
			fmt.Fprintf(stderr, "probeopt: warning: %v\n", &r)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, name := range b.MapNames() {
		m := b.Map(name)
		if m.Type() != ebpf.RingBuf && m.Type() != ebpf.PerfEventArray {
			continue
		}
		rd, err := maps.NewReader(m)
		if err != nil {
			abandon()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			streamRecords(rd, name, out, stop)
		}()
	}
	pr, err := b.Printk()
	if err != nil {
		abandon()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamPrintk(pr, out, stop)
	}()
	if err := tr.Resume(); err != nil && !errors.Is(err, proc.ErrExited) {
		abandon()
		return err
	}
	detached := false
	select {
	case <-tr.Exited():
	case s := <-sigs:
		fmt.Fprintf(stderr, "probeopt: %v: removing the probes and detaching\n", s)
		if err := tr.Detach(); err != nil && !errors.Is(err, probe.ErrClosed) {
			fmt.Fprintf(stderr, "probeopt: detach: %v\n", err)
		}
		detached = true
	}
	close(stop)
	wg.Wait()
	for _, name := range b.MapNames() {
		printMap(out, name, b.Map(name))
	}
	if out.err != nil {
		return fmt.Errorf("write output: %w", out.err)
	}
	if detached {
		return nil
	}
	es, err := tr.Wait()
	if err != nil {
		return err
	}
	switch {
	case es.Signal != 0:
		return &exitCodeError{128 + es.Signal}
	case es.Code != 0 && o.pid == 0:
		return &exitCodeError{es.Code}
	}
	return nil
}

// runPrintk is a trace_printk line of "run --json".
type runPrintk struct {
	Line string `json:"trace_printk"`
}

// streamRecords writes the records of ring buffer or perf event array
// name until stop is closed, and then those left.
func streamRecords(rd *maps.Reader, name string, out *runOut, stop <-chan struct{}) {
	stream(rd.SetDeadline, func() error {
		rec, err := rd.Read()
		if err == nil {
			data := hex.EncodeToString(rec.RawSample)
			out.line(runRecord{Map: name, Data: data}, name+": "+data+"\n")
		}
		return err
	}, stop)
}

// streamPrintk writes the trace_printk lines until stop is closed, and
// then those left.
func streamPrintk(pr *bpf.PrintkReader, out *runOut, stop <-chan struct{}) {
	stream(pr.SetDeadline, func() error {
		line, err := pr.Read()
		if err == nil {
			out.line(runPrintk{Line: line}, "trace_printk: "+line+"\n")
		}
		return err
	}, stop)
}

// stream calls next, which writes one item, until stop is closed and
// next fails (nothing left before the deadline), waking every 50 ms to
// look at stop.
func stream(setDeadline func(time.Time), next func() error, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			setDeadline(time.Now())
		default:
			setDeadline(time.Now().Add(50 * time.Millisecond))
		}
		if next() != nil {
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// printMap writes map m's entries (nothing for a ring buffer or a perf
// event array: their records were streamed).
func printMap(out *runOut, name string, m *maps.Map) {
	if m.Type() == ebpf.RingBuf || m.Type() == ebpf.PerfEventArray {
		return
	}
	rm := runMap{Map: name, Type: mapTypeNames[m.Type()], KeySize: m.KeySize(), ValueSize: m.ValueSize(), Entries: []runMapEntry{}}
	var text strings.Builder
	fmt.Fprintf(&text, "map %s %s key %d value %d\n", name, rm.Type, rm.KeySize, rm.ValueSize)
	es, err := m.Entries()
	if err != nil {
		rm.Error = err.Error()
		fmt.Fprintf(&text, "  error: %v\n", err)
	}
	for _, e := range es {
		re := runMapEntry{Key: hex.EncodeToString(e.Key)}
		if e.Values != nil {
			for _, v := range e.Values {
				re.Values = append(re.Values, hex.EncodeToString(v))
			}
			fmt.Fprintf(&text, "  %s: %s\n", re.Key, strings.Join(re.Values, " "))
		} else {
			re.Value = hex.EncodeToString(e.Value)
			fmt.Fprintf(&text, "  %s: %s\n", re.Key, re.Value)
		}
		rm.Entries = append(rm.Entries, re)
	}
	out.line(rm, text.String())
}
