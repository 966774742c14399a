# -DMANYSHOT_ENGINE_ONLY=ON: the engine's libraries and the tests that need neither gRPC nor
# storage. The ARM cross-check (scripts/arm_check.sh) builds this under the aarch64 toolchain
# (cmake/aarch64-linux-gnu.cmake) and runs the tests under qemu-user: the CPU kernels through
# every target the emulated CPU executes, and the model files (safetensors, configs) read on a
# second architecture. Targets and test names are those of the full build.
add_subdirectory(engine)
if(NOT BUILD_TESTING)
  return()
endif()
find_package(GTest CONFIG REQUIRED)
include(GoogleTest)

set(MANYSHOT_GPT2_TOKENIZER_DIR "/usr/local/share/manyshot/gpt2" CACHE PATH "GPT-2 vocab.json + merges.txt")
get_filename_component(MANYSHOT_SHARED_DIR "${PROJECT_SOURCE_DIR}/../shared" ABSOLUTE)
set(engine_only_test_definitions MANYSHOT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                 MANYSHOT_BINARY_DIR="${PROJECT_BINARY_DIR}"
                                 MANYSHOT_GPT2_TOKENIZER_DIR="${MANYSHOT_GPT2_TOKENIZER_DIR}"
                                 MANYSHOT_SHARED_DIR="${MANYSHOT_SHARED_DIR}")
function(manyshot_engine_only_tests target label libs)
  list(TRANSFORM ARGN PREPEND ${PROJECT_SOURCE_DIR}/tests/)
  add_executable(${target} ${ARGN})
  target_link_libraries(${target} PRIVATE ${libs} manyshot_warnings GTest::gtest_main
                        GTest::gmock)
  target_compile_definitions(${target} PRIVATE ${engine_only_test_definitions})
  # Listed when ctest runs (under the emulator when cross-compiling), not after every link.
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120
                       PROPERTIES LABELS ${label})
endfunction()

# The CPU kernels, each test once per target the CPU executes (tests/engine/backend/
# cpu_target_param.h), and the thread pool they run on.
manyshot_engine_only_tests(cpu_kernel_tests engine/backend manyshot_cpu
  engine/backend/alibi_attention_test.cc
  engine/backend/cpu_context_attention_test.cc
  engine/backend/cpu_decode_attention_test.cc
  engine/backend/cpu_gelu_erf_test.cc
  engine/backend/cpu_linear_weights_test.cc
  engine/backend/cpu_target_test.cc
  engine/backend/thread_pool_test.cc)
# MANYSHOT_CPU_TARGET read at start-up: the baseline target of the CPU, and a name none runs.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(baseline_target neon)
else()
  set(baseline_target sse4)
endif()
foreach(value ${baseline_target} avx9000)
  add_test(NAME cpu_kernel_tests.cpu_target_from_environment_${value} COMMAND cpu_kernel_tests
           --gtest_filter=CpuTargetChoiceTest.TheEnvironmentVariableChoosesTheTarget)
  set_tests_properties(cpu_kernel_tests.cpu_target_from_environment_${value} PROPERTIES
                       ENVIRONMENT MANYSHOT_CPU_TARGET=${value} LABELS engine/backend)
endforeach()

# Model files: safetensors, config.json of every family, the synthetic models' writer.
file(GLOB model_test_sources RELATIVE ${PROJECT_SOURCE_DIR}/tests CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/tests/engine/model/*_test.cc)
manyshot_engine_only_tests(model_io_tests engine/model
  "manyshot_model_io;manyshot_synthetic_models" ${model_test_sources})
