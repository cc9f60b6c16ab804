// Package browsertest drives the admin dashboard in headless Chromium
// (Debian's chromium at /usr/bin/chromium) with chromedp. It is a module
// of its own so that chromedp is no requirement of the library's; .ci/run
// runs it:
//
//	cd admin/browsertest && go test ./...
package browsertest
