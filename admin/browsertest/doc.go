// Package browsertest drives the admin dashboard in headless Chromium
// (Debian's chromium at /usr/bin/chromium) with chromedp. It is a module
// of its own so that chromedp is no requirement of the library's; .ci/run
// runs it:
//
//	cd admin/browsertest && go test ./...
//
// The server the dashboard runs against (broker, ledger, a running Server,
// the handler and its tokens) is admin/internal/admintest, the environment
// admin's own HTTP tests use.
package browsertest
