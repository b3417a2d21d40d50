# pnnorm against the PyTorch float64 reference (tests/torch_ref), at 1, 2 and 3 ranks.
# Skipped (exit 77) when numpy or torch are missing under the Python interpreter.
if(TARGET pnnorm)
  if(EXISTS /usr/bin/python3)
    set(PN_NORMS_PYTHON /usr/bin/python3)
  else()
    find_program(PN_NORMS_PYTHON NAMES python3)
  endif()
  if(PN_NORMS_PYTHON)
    add_test(NAME pnnorm_vs_torch
             COMMAND ${PN_NORMS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/torch_ref/check_pnnorm.py
                     --pnnorm $<TARGET_FILE:pnnorm> --mpirun ${MPIEXEC_BIN})
    set_tests_properties(pnnorm_vs_torch PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
  endif()
endif()
