package main

// The probed functions of "bench trace" (benchtrace_amd64.s).
func benchTraceNop()
func benchTracePush()
func benchTraceMov()
func benchTraceRIP()
func benchTraceSSE()

// benchTraceFuncs maps the kinds to the functions the target calls.
var benchTraceFuncs = map[string]func(){
	"nop":  benchTraceNop,
	"push": benchTracePush,
	"mov":  benchTraceMov,
	"rip":  benchTraceRIP,
	"sse":  benchTraceSSE,
}
