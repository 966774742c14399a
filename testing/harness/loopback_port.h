// Ports for the processes a test starts on 127.0.0.1.
#pragma once

namespace manyshot::testing {

// A port that was free on 127.0.0.1 a moment ago (the kernel's pick for port 0), or 0. Only for
// processes that cannot report the port they bound (HAProxy, nginx): another process may take
// it in between, so a test that uses it checks that its process came up.
int FreeLoopbackPort();

}  // namespace manyshot::testing
