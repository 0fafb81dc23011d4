// Throws through cleanups (destructors) and catches on every run, and has
// cold parts (GCC gives a function's unlikely code its own FDE and LSDA).
// Built by the plan and probe tests.
#include <stdexcept>
#include <cstdio>
#include <string>

struct Noisy {
	int n;
	explicit Noisy(int n) : n(n) {}
	~Noisy() { std::printf("~%d\n", n); }
};

__attribute__((noinline)) int may_throw(int x) {
	if (x > 3)
		throw std::runtime_error("big " + std::to_string(x));
	return x * 2;
}

__attribute__((noinline)) int cleanup(int x) {
	Noisy a(x), b(x + 1);
	return may_throw(x) + may_throw(x + 1);
}

__attribute__((noinline)) int catches(int x) {
	try {
		Noisy a(x);
		return cleanup(x);
	} catch (const std::runtime_error &e) {
		std::printf("caught %s\n", e.what());
		return -1;
	} catch (...) {
		return -2;
	}
}

__attribute__((noinline)) int nested(int x) {
	int r = 0;
	for (int i = 0; i < x; i++) {
		try {
			r += catches(i);
			std::string s(static_cast<size_t>(i), 'x');
			r += may_throw(static_cast<int>(s.size()));
		} catch (const std::exception &) {
			r -= 100;
		}
	}
	return r;
}

int main(int argc, char **) { std::printf("%d\n", nested(argc + 7)); return 0; }
