//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package journalproc

import "os"

// CanLowerPriority says the writer process can lower its priority here: it cannot, so serve
// writes the journal in-process, as a writer process would gain nothing.
const CanLowerPriority = false

func lowerPriority() {}

func self() (string, error) { return os.Executable() }
