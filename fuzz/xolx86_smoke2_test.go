//go:build linux && amd64

package fuzz

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

func TestXOLSmokeCampaign(t *testing.T) {
	o, err := NewXOLX86Oracle()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	v, _ := HostVendor()
	n, _ := strconv.Atoi(os.Getenv("XN"))
	if n == 0 {
		n = 20000
	}
	shown := map[string]int{}
	c := XOLX86Campaign{Cases: n, Seed: 1, Class: os.Getenv("XCLASS"), Vendor: v, OnMismatch: func(m *XOLX86Mismatch) bool {
		k := m.Case.Class + m.Run
		shown[k]++
		if shown[k] <= 3 {
			fmt.Println(m)
		}
		return true
	}}
	rep, err := c.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%+v\n", *rep)
	for k, v := range rep.Classes {
		fmt.Println(k, *v)
	}
}
