// Starts the fauxqs SQS emulator on loopback only. fauxqs's own CLI listens
// on 0.0.0.0; this script builds the same app with buildApp() and binds it
// to 127.0.0.1. Usage: node fauxqs-server.mjs <fauxqs-install-dir> <port>
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, portArg] = process.argv.slice(2);
const port = Number.parseInt(portArg ?? "", 10);
if (!dir || !Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error("usage: node fauxqs-server.mjs <fauxqs-install-dir> <port>");
  process.exit(2);
}

const pkgDir = join(dir, "node_modules", "fauxqs");
const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
const entry = pkg.exports?.["."]?.import?.default ?? pkg.main;
const { buildApp } = await import(pathToFileURL(join(pkgDir, entry)).href);

// logger: false keeps per-request logs out of the log file; start-up and
// errors are written below.
const app = buildApp({ logger: false });
const address = await app.listen({ host: "127.0.0.1", port });
console.log(`fauxqs ${pkg.version} listening on ${address} (pid ${process.pid})`);

let closing = false;
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    if (closing) return;
    closing = true;
    app.close().then(
      () => process.exit(0),
      (err) => {
        console.error("fauxqs: close failed:", err);
        process.exit(1);
      },
    );
  });
}
