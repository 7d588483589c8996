# Turns page.html into a C array (cmake -DIN=... -DOUT=... -P embed.cmake):
# the page ships inside the binary, so it works offline.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "/* generated from tools/serve/page.html by embed.cmake */\n#include <stddef.h>\nconst char serve_page_html[] = {${body} 0};\nconst size_t serve_page_html_len = ${bytes};\n")
