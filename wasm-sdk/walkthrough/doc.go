// Package walkthrough owns the policy author's walkthrough of
// wasm-sdk/README.md ("From an empty directory, per language") as tests
// follow it: Parse takes its files from the page itself (the fenced blocks
// marked "<!-- walkthrough LANG: PATH -->" for one language and
// "<!-- walkthrough: PATH -->" for every language), so the page cannot
// drift from what is tested; Setup lays an empty directory out as the
// walkthrough leaves it before `yardctl policy build`. It runs no yardctl
// command itself: the tests do, as a user would.
package walkthrough
