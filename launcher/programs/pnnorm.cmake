# pnnorm (SPEC section 7): runs one norm layer on .npy data, for checks against other frameworks.
add_executable(pnnorm ${CMAKE_CURRENT_LIST_DIR}/pnnorm_main.cpp ${CMAKE_CURRENT_LIST_DIR}/npy.cpp)
target_link_libraries(pnnorm PRIVATE pn_layers Boost::program_options)
set_target_properties(pnnorm PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
