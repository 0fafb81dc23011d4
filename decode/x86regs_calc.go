package decode

// addSrc adds register r, named by source src of entry e, to the read and
// written sets as the entry's masks say; without any REX prefix a byte
// operand's registers 4-7 are ah, ch, dh and bh (registers 0-3).
func addSrc(e *x86Entry, src uint8, r int, noREX bool, rd, wr RegSet) (RegSet, RegSet) {
	if e.srcByte&src != 0 && noREX && r >= 4 && r < 8 {
		r -= 4
	}
	m := RegSet(1) << uint(r)
	if e.srcR&src != 0 {
		rd |= m
	}
	if e.srcW&src != 0 {
		wr |= m
	}
	return rd, wr
}
