package kuprobe

// Site is one place a kernel uprobe counts: the instruction at a file
// offset, or with Return the returns of the function that starts there.
type Site struct {
	Path   string
	Offset uint64
	Return bool
}
