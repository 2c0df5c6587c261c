package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// The markers of the soak section in a markdown file.
const (
	sectionBegin = "<!-- soak:begin -->"
	sectionEnd   = "<!-- soak:end -->"
)

// replaceSection returns doc with what lies between the soak section's
// markers replaced by body, and the rest unchanged.
func replaceSection(doc []byte, body string) ([]byte, error) {
	begin := bytes.Index(doc, []byte(sectionBegin))
	end := bytes.Index(doc, []byte(sectionEnd))
	switch {
	case begin < 0 || end < 0:
		return nil, fmt.Errorf("no %s … %s section", sectionBegin, sectionEnd)
	case end < begin:
		return nil, fmt.Errorf("%s comes before %s", sectionEnd, sectionBegin)
	case bytes.Count(doc, []byte(sectionBegin)) > 1 || bytes.Count(doc, []byte(sectionEnd)) > 1:
		return nil, fmt.Errorf("more than one %s … %s section", sectionBegin, sectionEnd)
	}
	var out bytes.Buffer
	out.Write(doc[:begin+len(sectionBegin)])
	out.WriteString("\n")
	out.WriteString(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		out.WriteString("\n")
	}
	out.Write(doc[end:])
	return out.Bytes(), nil
}

// writeSection rewrites the soak section of the markdown file at path
// with body. It writes a new file beside it and renames it over the old,
// so that a reader never sees half of it.
func writeSection(path, body string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceSection(doc, body)
	if err != nil {
		return fmt.Errorf("--doc %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".soak-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing left to remove
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
