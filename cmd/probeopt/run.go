package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
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
	obj, targets, err := openRunObject(objPath, o.attach, stderr)
	if err != nil {
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
	sigs, stopSignals := notifyStop()
	defer stopSignals()
	tr, err := startTracer(o.pid, argv, nil)
	if err != nil {
		return err
	}
	// From here on a failure leaves nothing behind: the probes go with
	// a detach, or the process with a kill.
	b, endStreams, err := startPrograms(tr, obj, targets, out, stderr)
	if err != nil {
		abandonTracer(tr, o.pid, stderr)
		return err
	}
	detached := awaitExitOrSignal(tr, sigs, stderr)
	endStreams()
	for _, name := range b.MapNames() {
		printMap(out, name, b.Map(name))
	}
	if out.err != nil {
		return fmt.Errorf("write output: %w", out.err)
	}
	if detached {
		return nil
	}
	return runExit(tr, o.pid)
}

// startPrograms attaches the programs in the stopped process, starts
// streaming their output and lets the process run; endStreams stops the
// streams once what is left has been written.
func startPrograms(tr *probe.Tracer, obj *bpf.Object, targets map[string]string, out *runOut, stderr io.Writer) (b *probe.BPF, endStreams func(), err error) {
	b, err = attachPrograms(tr, obj, targets, stderr)
	if err != nil {
		return nil, nil, err
	}
	endStreams, err = streamOutput(b, out)
	if err != nil {
		return nil, nil, err
	}
	if err := tr.Resume(); err != nil && !errors.Is(err, proc.ErrExited) {
		endStreams()
		return nil, nil, err
	}
	return b, endStreams, nil
}

// openRunObject opens the object at objPath, finds the target of each
// of its programs (attach's PROG=SPEC or the program's section) and has
// the running kernel verify it, before any process is touched; the
// verifier's log of a rejected program goes to stderr.
func openRunObject(objPath string, attach []string, stderr io.Writer) (*bpf.Object, map[string]string, error) {
	obj, err := bpf.Open(objPath)
	if err != nil {
		return nil, nil, err
	}
	targets := map[string]string{}
	for _, a := range attach {
		p, s, _ := strings.Cut(a, "=")
		if obj.Program(p) == nil {
			return nil, nil, fmt.Errorf("--attach %s: no program %q in %s", a, p, objPath)
		}
		targets[p] = s
	}
	for _, p := range obj.Programs {
		if _, ok := targets[p.Name]; !ok && p.Section.Manual {
			return nil, nil, fmt.Errorf("program %s of section %s names no target: give --attach %s=SPEC", p.Name, p.Section, p.Name)
		}
	}
	if err := obj.Verify(); err != nil {
		var ve *bpf.VerifierError
		if errors.As(err, &ve) {
			for _, l := range ve.Log {
				fmt.Fprintf(stderr, "probeopt: verifier: %s\n", l)
			}
		}
		return nil, nil, err
	}
	return obj, targets, nil
}

// attachPrograms loads the object into the traced process and attaches
// each program to its target (targets[name], or its section's when
// there is none); why a program could not be attached goes to stderr,
// and the error is then errReported. The sites refused are warned of.
func attachPrograms(tr *probe.Tracer, obj *bpf.Object, targets map[string]string, stderr io.Writer) (*probe.BPF, error) {
	b, err := tr.LoadBPF(obj, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range obj.Programs {
		if _, err := b.Attach(p.Name, targets[p.Name], nil); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(stderr, "probeopt: program %s: %s\n", p.Name, line)
			}
			return nil, errReported
		}
	}
	warnRefused(stderr, tr)
	return b, nil
}

// streamOutput starts writing the records of every ring buffer and perf
// event array of b, and the trace_printk lines, to out while the process
// runs; end stops the streams once what is left has been written.
func streamOutput(b *probe.BPF, out *runOut) (end func(), err error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	end = func() {
		close(stop)
		wg.Wait()
	}
	for _, name := range b.MapNames() {
		m := b.Map(name)
		if m.Type() != ebpf.RingBuf && m.Type() != ebpf.PerfEventArray {
			continue
		}
		rd, err := maps.NewReader(m)
		if err != nil {
			end()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			streamRecords(rd, name, out, stop)
		}()
	}
	pr, err := b.Printk()
	if err != nil {
		end()
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		streamPrintk(pr, out, stop)
	}()
	return end, nil
}

// runExit waits for the process and returns run's outcome: CMD's exit
// status when CMD failed (128+N when signal N killed it; an attached
// process's status is its own business), nil otherwise.
func runExit(tr *probe.Tracer, pid int) error {
	es, err := tr.Wait()
	if err != nil {
		return err
	}
	switch {
	case es.Signal != 0:
		return &exitCodeError{128 + es.Signal}
	case es.Code != 0 && pid == 0:
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
