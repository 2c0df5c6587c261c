//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

// lowerPriority does nothing here: the platform has no nice.
func lowerPriority() {}
