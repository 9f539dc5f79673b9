# Turns a file into a C++ source defining `std::string_view <FUNC>()` in namespace tq, so the
# binary serves it without reading anything at run time.
# cmake -DIN=web/admin.html -DOUT=gen/admin_page.cpp -DFUNC=admin_page_html -P web/embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by web/embed.cmake: do not edit.\n#include <string_view>\n\nnamespace tq {\nnamespace {\nconst char kData[] = {\n${bytes}'\\0'};\n}  // namespace\nstd::string_view ${FUNC}() { return std::string_view(kData, ${size}); }\n}  // namespace tq\n")
file(RENAME "${OUT}.tmp" "${OUT}")
