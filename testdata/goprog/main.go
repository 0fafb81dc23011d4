// Command goprog is the Go fixture of the elfscan and scan tests: a small
// program with functions, methods, closures and a generic function, built
// by the tests (stripped and not) with the go command.
package main

import (
	"fmt"
	"os"
	"strings"
)

type shape interface{ area() float64 }

type rect struct{ w, h float64 }

func (r rect) area() float64 { return r.w * r.h }

type circle struct{ r float64 }

func (c *circle) area() float64 { return 3.14159 * c.r * c.r }

//go:noinline
func total(shapes []shape) float64 {
	s := 0.0
	for _, sh := range shapes {
		s += sh.area()
	}
	return s
}

//go:noinline
func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, v := range in {
		out = append(out, f(v))
	}
	return out
}

func main() {
	shapes := []shape{rect{2, 3}, &circle{1}}
	n := len(os.Args)
	names := mapSlice(os.Args, func(s string) string { return strings.ToUpper(s) + fmt.Sprint(n) })
	fmt.Println(total(shapes), len(names))
}
