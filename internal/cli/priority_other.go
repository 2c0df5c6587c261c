//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

import "os"

// canLowerPriority says lowerPriority works here: it does not, so serve
// writes the journal in-process, as a writer process would gain nothing.
const canLowerPriority = false

func lowerPriority() {}

func self() (string, error) { return os.Executable() }
